package rpcbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/diskstore"
	"github.com/sluicehq/sluice/store/memstore"
)

// The window every benchmark hit charges: a GCRA window (Sluice's token
// bucket, the algorithm gubernator uses by default) of BenchLimit per
// BenchWindow, far above what a key receives in a run, so every hit is
// admitted. A denial would still count as a decision.
const (
	BenchLimit  = 1_000_000
	BenchWindow = time.Minute
)

// keysPerPartition is how many window keys share one partition: a tenant
// with several limits. A 32-command RPC hits every key of 4 partitions.
const keysPerPartition = sluiceCmds

type sluiceSystem struct {
	steps, cmds int
	coalesce    bool
	adm         admissionMode
	partitions  []string // partition names, by index
	windowKeys  []string // window keys within a partition, by index

	dir     string
	fs      *syncCountingFS // counts the log's fsyncs; nil on memstore
	store   engine.Store
	http    *http.Server
	cl      *client.Client
	eng     *engine.Engine
	callers atomic.Int64 // numbers the callers' fairness identities
}

// admissionMode is what a Sluice configuration does about admission: the
// server's Admitter, and whether each caller sends fairness identities.
type admissionMode struct {
	on, fair   bool // an Admitter; its family fair
	identities bool // each caller sends a source (with its tiers) and a principal of its own
	mem        bool // memstore instead of the durable diskstore
	unleased   bool // every fair RPC's quotas charged in the store (admission.Config.QuotaChunk 0)
}

// startSluice returns the start function of a Sluice configuration: a real
// net/http server (the server package's handler and http.Server
// constructor, default timeouts) on a loopback listener in this process,
// over the durable diskstore with its default fsync policy (always) in a
// fresh temporary directory, called through the client package, which
// coalesces concurrent calls into envelopes unless coalesce is false.
func startSluice(steps, cmds int, coalesce bool) func(context.Context, Options) (instance, error) {
	return startSluiceAdmission(steps, cmds, coalesce, admissionMode{})
}

// startSluiceAdmission is startSluice with admission configured by adm.
func startSluiceAdmission(steps, cmds int, coalesce bool, adm admissionMode) func(context.Context, Options) (instance, error) {
	return func(ctx context.Context, o Options) (instance, error) {
		s := &sluiceSystem{steps: steps, cmds: cmds, coalesce: coalesce, adm: adm}
		nParts := max(o.Keys/keysPerPartition, steps)
		s.partitions = make([]string, nParts)
		for i := range s.partitions {
			s.partitions[i] = "tenant-" + strconv.Itoa(i)
		}
		s.windowKeys = make([]string, keysPerPartition)
		for i := range s.windowKeys {
			s.windowKeys[i] = "limit-" + strconv.Itoa(i)
		}
		if err := s.start(ctx, o); err != nil {
			_ = s.close()
			return nil, err
		}
		return s, nil
	}
}

func randomSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

func (s *sluiceSystem) start(ctx context.Context, o Options) error {
	// The credentials sluice serve creates for a new data directory: the
	// pepper in the compact form, as client.NewPepper makes it, unless
	// asked for the hex form.
	secret, pepper, token := randomSecret(), client.NewPepper(), randomSecret()
	if o.HexNames {
		pepper = randomSecret()
	}
	dir, err := os.MkdirTemp(o.Dir, "sluice-bench-")
	if err != nil {
		return err
	}
	s.dir = dir
	var addr string
	err = asServer(ctx, func(context.Context) error {
		st, err := s.openStore(o)
		if err != nil {
			return err
		}
		s.store = st
		eng := engine.New(st)
		scfg := server.DefaultConfig()
		scfg.Secrets = []string{secret}
		scfg.OperatorToken = token
		// Counted as by sluice serve, whose registry this stands for.
		scfg.Registerer = prometheus.NewRegistry()
		if s.adm.on {
			acfg := admission.DefaultConfig()
			acfg.Total = algo.MaxLimit // never exhausted: every RPC measured is admitted
			if s.adm.fair {
				acfg.Fair = []string{admission.DefaultFamily}
			}
			if s.adm.unleased {
				acfg.QuotaChunk = 0
			}
			scfg.Admission = admission.New(eng, acfg)
		}
		srv, err := server.NewHTTPServer(server.New(eng, scfg), server.DefaultHTTPConfig())
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		s.http = srv
		addr = ln.Addr().String()
		go func() { _ = srv.Serve(ln) }()
		return nil
	})
	if err != nil {
		return err
	}
	ccfg := client.Config{URL: "http://" + addr, Secret: secret, Pepper: pepper, HTTPVersion: o.HTTPVersion, Coalesce: o.Coalesce}
	if !s.coalesce {
		ccfg.Coalesce = client.CoalesceOff
	}
	s.cl = client.New(ccfg)
	if err := s.cl.Err(); err != nil {
		return err
	}
	if _, err := s.cl.Ping(ctx); err != nil {
		return err
	}
	s.eng = engine.New(s.cl)
	return nil
}

// openStore opens the configuration's store: the durable diskstore with
// its default fsync policy (always) in s.dir, or memstore.
func (s *sluiceSystem) openStore(o Options) (engine.Store, error) {
	if s.adm.mem {
		return memstore.New(memstore.DefaultConfig())
	}
	cfg := diskstore.DefaultConfig() // fsync always
	s.fs = newSyncCountingFS()
	cfg.FS = s.fs
	if o.Store != nil {
		o.Store(&cfg)
	}
	cfg.Dir = s.dir
	return diskstore.Open(cfg)
}

// sluiceCaller is one caller's reusable request and the engine it calls
// through: a view of the client carrying its own fairness identities when
// the configuration sends them.
type sluiceCaller struct {
	req *engine.Request
	eng *engine.Engine
}

// callerIdentity returns the n-th caller's source address and principal:
// an IPv6 address in a /48 of its own, so that its source bucket and both
// of its tiers are its alone, as are its principal's.
func callerIdentity(n int64) (source, principal string) {
	return fmt.Sprintf("2001:db8:%x::1", n), "principal-" + strconv.FormatInt(n, 10)
}

// walCounts returns the fsyncs of the store's write-ahead log so far, and
// the bytes written to it (none on memstore).
func (s *sluiceSystem) walCounts() walCounts {
	if s.fs == nil {
		return walCounts{}
	}
	return walCounts{syncs: s.fs.walSyncs.Load(), bytes: s.fs.walBytes.Load(), syncNanos: s.fs.walSyncNanos.Load()}
}

func hit(key string) engine.Command {
	return engine.Hit(1, engine.Window{Key: key, Kind: algo.KindGCRA, Limit: BenchLimit, WindowMs: BenchWindow.Milliseconds()})
}

// caller returns w's reusable request and engine, made on first use.
func (s *sluiceSystem) caller(w *caller) *sluiceCaller {
	if c, ok := w.scratch.(*sluiceCaller); ok {
		return c
	}
	r := &engine.Request{Mode: engine.All, Steps: make([]engine.Step, s.steps)}
	for i := range r.Steps {
		r.Steps[i].Commands = make([]engine.Command, s.cmds)
		for j := range r.Steps[i].Commands {
			r.Steps[i].Commands[j] = hit(s.windowKeys[j])
		}
	}
	c := &sluiceCaller{req: r, eng: s.eng}
	if s.adm.identities {
		c.eng = engine.New(s.cl.WithFairness(callerIdentity(s.callers.Add(1))))
	}
	w.scratch = c
	return c
}

func (s *sluiceSystem) call(ctx context.Context, w *caller) (int, error) {
	c := s.caller(w)
	r := c.req
	if s.steps == 1 && s.cmds == 1 {
		// One hit on one of the Keys limiter keys, chosen at random.
		k := w.rng.IntN(len(s.partitions) * keysPerPartition)
		r.Steps[0].Partition = s.partitions[k/keysPerPartition]
		r.Steps[0].Commands[0].Windows[0].Key = s.windowKeys[k%keysPerPartition]
	} else {
		// Every key of s.steps consecutive partitions from a random one.
		p := w.rng.IntN(len(s.partitions))
		for i := range r.Steps {
			r.Steps[i].Partition = s.partitions[(p+i)%len(s.partitions)]
		}
	}
	r.OperationID = "" // a fresh id per call, made by the client
	resp, err := c.eng.Do(ctx, r)
	if err != nil {
		return 0, err
	}
	if len(resp.Steps) != s.steps {
		return 0, fmt.Errorf("answer holds %d steps, want %d", len(resp.Steps), s.steps)
	}
	denied := 0
	for i := range resp.Steps {
		st := &resp.Steps[i]
		if st.Skipped || len(st.Results) != s.cmds {
			return 0, fmt.Errorf("step %d: skipped %v with %d results, want %d", i, st.Skipped, len(st.Results), s.cmds)
		}
		for j := range st.Results {
			if !st.Results[j].Allowed {
				denied++
			}
		}
	}
	return denied, nil
}

func (s *sluiceSystem) close() error {
	var errs []error
	if s.cl != nil {
		errs = append(errs, s.cl.Close())
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, s.http.Shutdown(ctx))
		cancel()
	}
	if s.store != nil {
		errs = append(errs, s.store.Close())
	}
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	return errors.Join(errs...)
}
