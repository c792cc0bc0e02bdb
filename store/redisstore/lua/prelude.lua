-- Sluice Redis store: one batch of commands on one partition, format 1.
--
-- The script is the files of this folder joined in the order store.go
-- lists them (prelude, values, counters, windows, budgets, gates, pace,
-- batch): one Lua chunk, whose locals each file sees from the files before
-- it. This file holds the constants every part shares.
--
-- This script is the Lua mirror of engine.Executor over package algo. Every
-- transition below has a Go original of the same name (hitFixed, slidingRetry,
-- gcraRemaining, PaceState.Take, ...); the conformance suite in
-- store/storetest holds the two to the same answers. Change them together.
--
-- Atomicity. Lua has no rollback, so the script runs in two phases: it first
-- evaluates every command against a local table of records (reading each
-- Redis key at most once, seeing its own earlier writes), then, only when no
-- command failed, encodes every write and finally issues them. Nothing is
-- written before the last command has been evaluated, and nothing that can
-- fail runs once writing has begun.
--
-- Numbers. Lua numbers are doubles, exact for integers below 2^53. Every
-- integer the Go side sends is bounded well below that (limits ≤ 2^40,
-- windows and TTLs ≤ 120 days, instants ≈ 2^41), except counters and
-- deltas, which may span int64 and are carried as decimal strings with exact
-- two-limb arithmetic. The GCRA products cost·W/limit and gap·limit/W reach
-- 2^74 and are computed exactly by muldiv. The sliding window's estimate is
-- floating point in Go too, and the operations below round identically
-- (IEEE double, one rounding per operation, no fused multiply-add).
-- The Go side sends only decimal integers within those bounds, but Lua's
-- tonumber also reads "nan", "inf", "1e3", "0x10": so an overridden clock
-- and every hit's cost, kind, limit and window are checked (clock,
-- validHit, spec) before anything is evaluated, and a call outside them is
-- answered INVALID, never evaluated (a NaN limit would admit every hit).
--
-- Two forms, one source. Every file defines functions and constants only;
-- the entry point is batch(keys, argv) at the end of batch.lua. store.go
-- wraps the chunk two ways:
--
--   * a function library (Redis 7 FUNCTION LOAD, then FCALL): the chunk
--     runs once, when the library is loaded, so every function and
--     constant below is created once and reused by every call;
--   * a script (EVALSHA, for servers without functions): the chunk ends
--     with "return batch(KEYS, ARGV)", and Redis runs all of it per call.
--
-- So nothing at the chunk's top level may depend on a call: what a call
-- needs (its clock, its keys and arguments, the records it has read) lives
-- in the chunk-level locals declared for it (below, and at the top of
-- batch.lua), which batch() sets afresh at the start of every call; its
-- working tables (the records read, the writes, a lone hit's result) are
-- emptied or overwritten then and reused rather than allocated anew.
-- The command families are built by functions that receive the batch's
-- core (S) and capture nothing else of a call; each is built when a batch
-- first uses it, and kept for later calls in the library form. No
-- constant table is ever changed in place.
--
-- Records. Each record is one Redis string under its own key: a MessagePack
-- array {kind, expireAt, fields...} where kind is engine.RecordKind and
-- expireAt the instant (Unix ms, by the store's clock) from which it is
-- absent. Redis's own expiry (PX) removes it physically at the same instant.
--
-- KEYS: KEYS[1] is the replay record's key when the batch has an operation
-- id; the others are the records the commands name, each the record prefix
-- (ARGV[3]) followed by the user key. All share the partition's hash tag.
--
-- ARGV:
--   1  format ("1")
--   2  the clock: "" to read Redis TIME, else an override in Unix ms (tests)
--   3  the partition's record key prefix, to name a receipt's budgets
--   4  the step's command hash (32 bytes), or "" for no replay record
--   5  the replay record's lifetime in ms
--   6  extra milliseconds of physical lifetime (0 unless the clock is
--      overridden, where Redis's clock and the store's differ)
--   7  the number of commands, then each command: an op code and its
--      fields, in the order keys.go writes them and the commands read them
--
-- A lone hit sent on its own (ARGV[1] LONE; see loneHit in batch.lua) has
-- arguments of its own: KEYS[1] is its window's record, and ARGV is LONE,
-- the clock, the prefix (as 2 and 3 above), then its spec, one argument
-- "<grace> <cost> <kind> <limit> <window>" in decimal: the extra lifetime
-- (as 6 above), the hit's cost and its window's kind, limit and window.
-- None of a batch's fields that a lone hit leaves empty or fixed is sent,
-- and the spec, the same few strings over and over, is parsed once and
-- memoised: Redis parses each argument and hands it to Lua as a string on
-- every call.
--
-- A joint step (ARGV[1] JOINT; see joint in batch.lua) carries several
-- batches, each with its keys and its arguments as above, and answers
-- {0, denied, each batch's reply...}: its writes are issued only when no
-- batch was denied or failed.
--
-- Reply: {0, replayed, denied, result...} on success, where each result is
-- {allowed, found, remaining, resetAt, retryAfter, at, ttl, int, value,
-- {windows...}} with int a decimal string and windows flat quadruples
-- {allowed, remaining, resetAt, retryAfter}; or {code, command, message}
-- when a command failed and nothing was written (codes below).
--
-- A lone hit, the commonest batch, has a compact reply: a batch of one
-- win.hit on one window without a replay record (ARGV[4] "", or the LONE
-- form) answers {0, allowed, window's remaining, window's resetAt,
-- window's retryAfter}. Its replayed is 0, its denied is not allowed, its
-- window's allowed is the hit's, its remaining, resetAt and retryAfter
-- are the window's as a hit of one window sets them (min(MAX_LIMIT, ·),
-- max(0, ·), max(0, ·)), and its other fields are a hit's zeros; the Go
-- side knows the shape from the batch it sent and fills them in.

local FORMAT = '1'
local JOINT = 'joint 1' -- ARGV[1] of a joint step (see joint in batch.lua)
local LONE = 'hit 1' -- ARGV[1] of a lone hit sent on its own (see loneHit in batch.lua)

-- Failure codes of the reply; the Go side maps them to engine sentinels.
local WRONG_TYPE, OVERFLOW, CONFLICT, CORRUPT, INVALID = 1, 2, 3, 4, 5

-- Record kinds: engine.RecordKind.
local VALUE, FIXED, SLIDING, LOG, GCRA, RECEIPT, GATE, PACE, REPLAY = 1, 2, 3, 4, 5, 6, 7, 8, 9

local MAX_LIMIT = 1099511627776 -- algo.MaxLimit, 2^40

-- A command's result is an array, in the order of the reply (see above),
-- so that it is sent as built: allowed and found are booleans until then,
-- and windows holds {allowed, remaining, resetAt, retry} tables.
local ALLOWED, FOUND, REMAINING, RESET_AT, RETRY, AT, TTL, INT, VAL, WINDOWS = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10

local max, min, floor, ceil = math.max, math.min, math.floor, math.ceil

-- The call's clock (Unix ms, by the store's clock) and the partition's
-- record key prefix: set by batch() at the start of every call and read by
-- every family.
local now, prefix
