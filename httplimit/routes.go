package httplimit

import (
	"fmt"
	"strings"
)

// routes is a compiled Config.Routes.
type routes struct {
	exact map[string]struct{}
	// subtrees holds the root of each "/x/*" pattern without its trailing
	// slash ("/x"), and "" for "/*".
	subtrees []string
}

func validateRoute(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w: route %q does not start with /", ErrInvalidConfig, p)
	case strings.Count(p, "*") > 1, strings.Contains(p, "*") && !strings.HasSuffix(p, "/*"):
		return fmt.Errorf("%w: route %q: * is allowed only as a final /* segment", ErrInvalidConfig, p)
	}
	return nil
}

func compileRoutes(patterns []string) routes {
	rs := routes{exact: make(map[string]struct{}, len(patterns))}
	for _, p := range patterns {
		if root, ok := strings.CutSuffix(p, "/*"); ok {
			rs.subtrees = append(rs.subtrees, root)
		} else {
			rs.exact[p] = struct{}{}
		}
	}
	return rs
}

// match reports whether path is selected. It allocates nothing.
func (rs *routes) match(path string) bool {
	if _, ok := rs.exact[path]; ok {
		return true
	}
	for _, root := range rs.subtrees {
		// The root itself, or anything below it: "/x" and "/x/…", never
		// "/xs".
		if strings.HasPrefix(path, root) && (len(path) == len(root) || path[len(root)] == '/') {
			return true
		}
	}
	return false
}
