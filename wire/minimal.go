package wire

import "strings"

// Minimal answers (RFC 7240). A client that sends "Prefer: return=minimal"
// with an RPC or an envelope may be answered in the minimal form, which
// leaves out every window list that only repeats its result's own fields
// (see engine.Response.AppendMinimalJSON); a server that answers so says
// "Preference-Applied: return=minimal". A server that does not know the
// preference ignores it and answers in full, without the header. A list is
// left out only where the client can rebuild it from its request
// (engine.Response.RestoreWindows), and a full answer never lacks one, so
// a client that asks may rebuild every missing list without reading the
// header. The preference changes the form of the answer, never what runs,
// and is not signed.
const (
	HeaderPrefer            = "Prefer"
	HeaderPreferenceApplied = "Preference-Applied"
	PreferMinimal           = "return=minimal"
)

// PrefersMinimal reports whether the values of a Prefer or
// Preference-Applied header hold the preference return=minimal: RFC 7240's
// comma-separated preferences, each a token, optionally "=" and a value
// (quoted or not), and parameters after ";". Tokens compare
// case-insensitively; whitespace around them is ignored.
func PrefersMinimal(values []string) bool {
	for _, v := range values {
		if v == PreferMinimal {
			return true
		}
		for pref := range strings.SplitSeq(v, ",") {
			pref, _, _ = strings.Cut(pref, ";")
			name, val, _ := strings.Cut(pref, "=")
			val = strings.TrimSpace(val)
			if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
				val = val[1 : len(val)-1]
			}
			if strings.EqualFold(strings.TrimSpace(name), "return") && strings.EqualFold(val, "minimal") {
				return true
			}
		}
	}
	return false
}

// AppendMinimalResponse appends the minimal JSON of r to dst: what
// AppendResponse writes, without the window lists that only repeat their
// results (see engine.Response.AppendMinimalJSON).
func AppendMinimalResponse(dst []byte, r *Response) []byte { return r.AppendMinimalJSON(dst) }

// AppendMinimalAnswer appends the JSON of a to dst as AppendAnswer does,
// with its response in the minimal form.
func AppendMinimalAnswer(dst []byte, a *Answer) []byte { return appendAnswer(dst, a, true) }
