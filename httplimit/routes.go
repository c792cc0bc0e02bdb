package httplimit

import (
	"fmt"
	"net/url"
	"path"
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

// selects reports whether a request for path is selected: path as the
// request spells it, or path as net/http's ServeMux cleans it (repeated
// slashes and dot segments resolved, a final slash kept, the empty path
// read as "/"). A router that cleans paths before routing (chi's
// CleanPath, gin's RemoveExtraSlash) routes the one as the other while
// URL.Path keeps the spelling sent, and the spellings of a path are
// without number, so none of them may escape its quota. It allocates
// nothing for a clean path.
func (rs *routes) selects(path string) bool {
	if rs.match(path) {
		return true
	}
	if clean, ok := cleanPath(path); ok {
		return rs.match(clean)
	}
	return false
}

// selectsURL reports whether a request for u is selected: u.Path as
// selects reads it, or, when the request was sent with escapes that
// decoding changes (u.RawPath is set), its escaped path cleaned as selects
// cleans a path, then decoded. chi routes by the escaped path, which its
// CleanPath middleware cleans, and so does gin with UseRawPath and
// RemoveExtraSlash: "/a%2Fb/../login" is "/login" to them, while its
// decoded path, "/a/b/../login", cleans to "/a/login". It allocates
// nothing for a request without escapes.
func (rs *routes) selectsURL(u *url.URL) bool {
	if rs.selects(u.Path) {
		return true
	}
	if u.RawPath == "" {
		return false
	}
	clean, _ := cleanPath(u.RawPath)
	p, err := url.PathUnescape(clean)
	return err == nil && rs.match(p)
}

// cleanPath returns p cleaned as net/http's ServeMux cleans a request's
// path, and whether that differs from p. A path that does not start with a
// slash ("*") is left alone.
func cleanPath(p string) (string, bool) {
	switch {
	case p == "":
		return "/", true
	case p[0] != '/' || !strings.Contains(p, "//") && !strings.Contains(p, "/."):
		return p, false
	}
	np := path.Clean(p)
	// path.Clean drops a final slash; put it back, without allocating when
	// only that slash went.
	if p[len(p)-1] == '/' && np != "/" {
		if len(p) == len(np)+1 && strings.HasPrefix(p, np) {
			np = p
		} else {
			np += "/"
		}
	}
	return np, np != p
}
