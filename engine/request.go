package engine

// Mode decides what a request does after a denial.
type Mode string

// The request modes.
const (
	// Sequential runs steps in order and skips every step after the first
	// step holding a denial. It is the default.
	Sequential Mode = "sequential"
	// All runs every step regardless of denials.
	All Mode = "all"
)

// Request is an ordered list of steps, each an atomic batch on one
// partition. No snapshot consistency across partitions is promised.
type Request struct {
	// OperationID makes the request replay-safe: every mutating step
	// records its results under this id for ReplayTTL, and a repeat of the
	// same id and commands returns them without charging again. Use a fresh
	// random id (NewOperationID) per logical operation, and the same id when
	// retrying after an unknown outcome. Empty disables replay records.
	OperationID string `json:"operationId,omitempty"`
	Mode        Mode   `json:"mode,omitempty"`
	Steps       []Step `json:"steps"`
}

// Step is one atomic batch of commands on one partition.
type Step struct {
	Partition string    `json:"partition"`
	Commands  []Command `json:"commands"`
}

// Response holds one StepResult per step of the request, in order.
type Response struct {
	Steps []StepResult `json:"steps"`
}

// StepResult is the outcome of one step.
type StepResult struct {
	// Skipped reports a step not run because an earlier step was denied in
	// a sequential request. Its Results are empty.
	Skipped bool `json:"skipped,omitempty"`
	// Replayed reports results returned from a replay record: nothing was
	// charged again.
	Replayed bool `json:"replayed,omitempty"`
	// Denied reports that at least one command was denied.
	Denied  bool     `json:"denied,omitempty"`
	Results []Result `json:"results"`
}

// Result is the outcome of one command. Which fields are set depends on the
// command; see the package documentation.
type Result struct {
	// Allowed is false for a denied win.hit, res.reserve, gate.acquire,
	// pace.take or pace.claim, and for a kv.set whose nx/xx condition did
	// not hold. Every other command is always allowed.
	Allowed bool `json:"allowed"`
	// Found reports a live record for kv.get, kv.del, kv.ttl, kv.expire,
	// res.refund (the receipt), gate.renew and gate.release (the lease).
	Found bool `json:"found,omitempty"`
	// Value is the value read by kv.get.
	Value string `json:"value,omitempty"`
	// Int is the counter after kv.incr.
	Int int64 `json:"int,omitempty"`
	// TTLMs is the remaining time to live read by kv.ttl.
	TTLMs int64 `json:"ttlMs,omitempty"`
	// Remaining is the smallest remaining allowance across the windows or
	// budgets of the command, never negative.
	Remaining int64 `json:"remaining"`
	// ResetAt is the Unix millisecond at which every window or budget of
	// the command will be empty, by the store's clock.
	ResetAt int64 `json:"resetAt,omitempty"`
	// RetryAfterMs is, for a denial, the delay after which the same command
	// would first be admitted assuming no other traffic; 0 otherwise.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
	// At is the slot of a pace.take or pace.claim (the Unix millisecond, by
	// the store's clock, before which the caller must not run) or the
	// penalty deadline after pace.penalize.
	At int64 `json:"at,omitempty"`
	// Windows holds the per-window (win.hit) or per-budget (res.reserve)
	// outcome, in the order given.
	Windows []WindowResult `json:"windows,omitempty"`
}

// WindowResult is the outcome of one window or budget.
type WindowResult struct {
	Allowed      bool  `json:"allowed"`
	Remaining    int64 `json:"remaining"`
	ResetAt      int64 `json:"resetAt"`
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}
