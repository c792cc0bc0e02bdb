// Package rpcbench measures Sluice's server over loopback side by side with
// gubernator v2 and with the bare transports under both: decisions per
// second and call latency for concurrent callers, every configuration in the
// same process and the same run, so that their ratios mean something on a
// shared, noisy machine.
//
// Each measurement starts its system afresh (a new durable store in a new
// temporary directory, a new daemon, a new server), drives it, and stops it,
// so no background work of one configuration (compactions, sweeps) runs
// during another's measurement.
package rpcbench

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/client"
)

// DefaultKeys is the number of distinct limiter keys calls spread over.
const DefaultKeys = 10_000

// Config is one measured configuration: a system and the shape of its calls.
type Config struct {
	// Name identifies the configuration on the command line and in tables.
	Name string
	// Title describes it for a reader.
	Title string
	// PerCall is the number of rate-limit decisions one call carries; the
	// floors carry one nominal decision (one request).
	PerCall int
	// Group, when set, leaves the configuration out of a run that names
	// none: it runs when named, or with its group (see Select).
	Group string
	// sluice marks Sluice's own configurations, those Options.SluiceProcs
	// applies to.
	sluice bool
	start  func(ctx context.Context, o Options) (instance, error)
}

// The configurations, in the order the harness runs them in each round.
const (
	HTTPFloor  = "http-floor"
	HTTP2Floor = "http2-floor"
	GRPCFloor  = "grpc-floor"
	Guber1     = "gubernator-1"
	Guber100   = "gubernator-100"
	Sluice1    = "sluice-1"
	// Sluice1Single is sluice-1 with coalescing off: every call its own
	// RPC, as before envelopes.
	Sluice1Single = "sluice-1-single"
	Sluice32      = "sluice-32"
	// The admission group: Sluice with 1 win.hit per RPC, admission off or
	// on, on the durable store or on memstore.
	Admission    = "admission"
	AdmOff       = "adm-off"
	AdmOn        = "adm-on"
	AdmOffIDs    = "adm-off-identities"
	AdmFair      = "adm-on-fair"
	AdmFairUnl   = "adm-on-fair-unleased"
	AdmMemOff    = "adm-mem-off"
	AdmMemOn     = "adm-mem-on"
	AdmMemOffIDs = "adm-mem-off-identities"
	AdmMemFair   = "adm-mem-on-fair"
	guberBatch   = 100
	// sluiceSteps × sluiceCmds commands of one RPC: the request bound.
	sluiceSteps = 4
	sluiceCmds  = 8
)

// Configs returns every configuration, in run order.
func Configs() []Config {
	return []Config{
		{Name: HTTPFloor, Title: "bare HTTP/1.1: trivial handler, same server and client transport", PerCall: 1, start: startHTTPFloor(client.HTTP1)},
		{Name: HTTP2Floor, Title: "bare HTTP/2 (h2c): trivial handler, same server and client transport", PerCall: 1, start: startHTTPFloor(client.HTTP2)},
		{Name: GRPCFloor, Title: "bare gRPC: unary health check", PerCall: 1, start: startGRPCFloor},
		{Name: Guber1, Title: "gubernator v2, in memory, 1 check per call", PerCall: 1, start: startGuber(1)},
		{Name: Guber100, Title: "gubernator v2, in memory, 100 checks per call", PerCall: guberBatch, start: startGuber(guberBatch)},
		{Name: Sluice1, sluice: true, Title: "Sluice, durable store, 1 win.hit per call, the default client (concurrent calls coalesced)", PerCall: 1, start: startSluice(1, 1, true)},
		{Name: Sluice1Single, sluice: true, Title: "Sluice, durable store, 1 win.hit per call, each call its own RPC", PerCall: 1, start: startSluice(1, 1, false)},
		{Name: Sluice32, sluice: true, Title: "Sluice, durable store, 4 steps × 8 win.hit per call", PerCall: sluiceSteps * sluiceCmds, start: startSluice(sluiceSteps, sluiceCmds, true)},
		admissionConfig(AdmOff, "admission off", admissionMode{}),
		admissionConfig(AdmOn, "admission on, one non-fair family", admissionMode{on: true}),
		admissionConfig(AdmOffIDs, "admission off, each caller sending a source (with its tiers) and a principal of its own", admissionMode{identities: true}),
		admissionConfig(AdmFair, "admission on, one fair family, each caller sending a source (with its tiers) and a principal of its own", admissionMode{on: true, fair: true, identities: true}),
		admissionConfig(AdmFairUnl, "admission on, one fair family, each caller sending a source (with its tiers) and a principal of its own, every RPC's quotas charged in the store (no quota leases)", admissionMode{on: true, fair: true, identities: true, unleased: true}),
		admissionConfig(AdmMemOff, "admission off", admissionMode{mem: true}),
		admissionConfig(AdmMemOn, "admission on, one non-fair family", admissionMode{on: true, mem: true}),
		admissionConfig(AdmMemOffIDs, "admission off, each caller sending a source (with its tiers) and a principal of its own", admissionMode{identities: true, mem: true}),
		admissionConfig(AdmMemFair, "admission on, one fair family, each caller sending a source (with its tiers) and a principal of its own", admissionMode{on: true, fair: true, identities: true, mem: true}),
	}
}

// admissionConfig is a configuration of the admission group: 1 win.hit
// per RPC on the durable store or on memstore.
func admissionConfig(name, title string, adm admissionMode) Config {
	store := "durable store"
	if adm.mem {
		store = "memstore"
	}
	return Config{Name: name, sluice: true, Title: "Sluice, " + store + ", 1 win.hit per RPC, " + title, PerCall: 1, Group: Admission, start: startSluiceAdmission(1, 1, false, adm)}
}

// Select returns the configurations named in a comma-separated list of
// configurations and groups, in run order; an empty list selects every
// configuration outside a group.
func Select(list string) ([]Config, error) {
	all := Configs()
	want := map[string]bool{}
	if strings.TrimSpace(list) == "" {
		for _, c := range all {
			want[c.Name] = c.Group == ""
		}
	} else {
		for name := range strings.SplitSeq(list, ",") {
			name = strings.TrimSpace(name)
			found := false
			for _, c := range all {
				if c.Name == name || c.Group == name {
					found, want[c.Name] = true, true
				}
			}
			if !found {
				return nil, fmt.Errorf("rpcbench: unknown configuration %q", name)
			}
		}
	}
	var out []Config
	for _, c := range all {
		if want[c.Name] {
			out = append(out, c)
		}
	}
	return out, nil
}
