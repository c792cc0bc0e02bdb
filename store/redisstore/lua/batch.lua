-- Part of the batch script (see prelude.lua): the batch itself: the clock, the records, the commands in order, and the writes.

-- The batch.

-- The call's state, set afresh by batch() at the start of every call.
local KEYS_, ARGV_ -- the call's keys and arguments
local hash, replayTTL, grace
local cache = {} -- Redis key → record array, or false when absent
local written = {} -- Redis key → true once the batch wrote or deleted it
local order = {} -- written keys, in order of first write
local mutated
local denied -- evaluate found a command not allowed
local argi -- the next argument to read

-- The command being evaluated, for failure replies.
local current

local function fail(code, msg)
	error({sluice = code, msg = msg}, 0)
end

-- name returns the user key of a Redis key, for messages.
local function name(key)
	if string.sub(key, 1, #prefix) == prefix then
		return string.format('%q', string.sub(key, #prefix + 1))
	end
	return 'the replay record'
end

-- Records: read once, then held and changed in the local table.

-- isInt reports whether v is an integer the script computes with exactly
-- (|v| < 2^53), as is every number the script stores: a record holding any
-- other number is corrupt, as its Go encoding would be.
local function isInt(v)
	return type(v) == 'number' and v == floor(v) and v > -9007199254740992 and v < 9007199254740992
end

local function decode(key, v)
	local ok, rec = pcall(cmsgpack.unpack, v)
	if not ok or type(rec) ~= 'table' or not isInt(rec[1]) or not isInt(rec[2]) or rec[1] < VALUE or rec[1] > REPLAY then
		fail(CORRUPT, 'key ' .. name(key) .. ' holds no Sluice record')
	end
	return rec
end

-- load reads the record stored at key, live or not, or false when there
-- is none. A key of another Redis type fails the command; any other
-- refusal of the GET (the ACL's, say) is Redis's error, which the batch
-- answers as it is.
local function load(key)
	local v = redis.pcall('GET', key)
	if type(v) == 'table' and v.err then
		if not string.find(v.err, '^%-?WRONGTYPE') then
			error({redis = v.err}, 0)
		end
		fail(WRONG_TYPE, 'key ' .. name(key) .. ' holds a Redis value that is not a Sluice record')
	end
	return v and decode(key, v) or false
end

-- get returns the live record at key as the batch sees it so far, or nil.
local function get(key)
	local rec = cache[key]
	if rec == nil then
		rec = load(key)
		cache[key] = rec
	end
	if rec and (written[key] or rec[2] > now) then
		return rec
	end
	return nil
end

local function touch(key)
	mutated = true
	if not written[key] then
		written[key] = true
		order[#order + 1] = key
	end
end

local function put(key, rec)
	touch(key)
	cache[key] = rec
end

local function del(key)
	touch(key)
	cache[key] = false
end

local function wrongType(key, have, want)
	local names = {'value', 'fixed window', 'sliding window', 'log window', 'gcra window', 'receipt', 'gate', 'pace', 'replay'}
	fail(WRONG_TYPE, 'key ' .. name(key) .. ' holds a ' .. names[have] .. ' record, not a ' .. names[want])
end

local function need(ok, key)
	if not ok then
		fail(CORRUPT, 'record at ' .. name(key) .. ' is malformed')
	end
end

local function isNumber(v)
	return type(v) == 'number'
end

-- value returns the live value record at k, failing on another kind.
local function value(k)
	local rec = get(k)
	if rec then
		if rec[1] ~= VALUE then
			wrongType(k, rec[1], VALUE)
		end
		need(type(rec[3]) == 'string', k)
	end
	return rec
end

-- Results and arguments.

local function newResult()
	return {false, false, 0, 0, 0, 0, 0, '0', '', {}}
end

-- lone is the result of a lone hit (see evaluate), reused by every call:
-- nothing keeps it past the call, whose reply copies its figures.
local lone = newResult()

local function addWindow(r, d)
	local w = r[WINDOWS]
	w[#w + 1] = d
end

-- encodeResult turns r into its reply form in place, the window tables
-- into flat quadruples (from the last, so that none is overwritten before
-- it is read).
local function encodeResult(r)
	local w = r[WINDOWS]
	for i = #w, 1, -1 do
		local d, j = w[i], 4 * (i - 1)
		w[j + 1], w[j + 2], w[j + 3], w[j + 4] = d.allowed and 1 or 0, d.remaining, d.resetAt, d.retry
	end
	r[ALLOWED], r[FOUND] = r[ALLOWED] and 1 or 0, r[FOUND] and 1 or 0
	return r
end

-- Commands read their fields from ARGV in order. Lua 5.1, which Redis
-- embeds, evaluates expression lists and table constructors left to right,
-- as the reads rely on.
local function arg()
	local v = ARGV_[argi]
	argi = argi + 1
	return v
end

-- memoised returns f memoised over the strings it is given: a call's
-- numbers are mostly the same few strings (key indexes, costs, kinds,
-- limits, windows), and a table lookup costs a fraction of a conversion.
-- A memo is dropped once it holds MEMO values, so that it stays small
-- whatever the calls send. (The script form starts every call empty.)
local MEMO = 1024
local function memoised(f)
	local memo, n = {}, 0
	return function(s)
		local v = memo[s]
		if v == nil then
			v = f(s)
			if v ~= nil then
				if n >= MEMO then
					memo, n = {}, 0
				end
				memo[s], n = v, n + 1
			end
		end
		return v
	end
end

-- tonum is tonumber over the arguments' strings, memoised.
local tonum = memoised(tonumber)

local function num()
	return tonum(arg())
end

local function key()
	return KEYS_[tonum(arg())]
end

-- keyAt returns the call's i-th key.
local function keyAt(i)
	return KEYS_[i]
end

-- S is what the command families need of the batch.
local S = {get = get, load = load, put = put, del = del, fail = fail, wrongType = wrongType, need = need, isNumber = isNumber, isInt = isInt,
	value = value, key = key, keyAt = keyAt, arg = arg, num = num, addWindow = addWindow, name = name}
local values, counters, windows, budgets, gates, pace
local hitOne -- a lone hit (see loneHit), built with windows

-- run runs one command, building its family on first use.
local function run(op, r)
	if op == 'hit' then
		if not windows then
			windows, hitOne = buildWindows(S)
		end
		windows(r)
	elseif op == 'get' or op == 'set' or op == 'del' or op == 'ttl' or op == 'expire' then
		values = values or buildValues(S)
		values[op](r)
	elseif op == 'incr' then
		counters = counters or buildCounters(S)
		counters.incr(r)
	elseif op == 'reserve' or op == 'refund' then
		counters = counters or buildCounters(S)
		budgets = budgets or buildBudgets(S, counters)
		budgets[op](r)
	elseif op == 'acquire' or op == 'renew' or op == 'release' then
		gates = gates or buildGates(S)
		gates(op, r)
	elseif op == 'take' or op == 'claim' or op == 'penalize' then
		pace = pace or buildPace(S)
		pace(op, r)
	else
		fail(INVALID, 'unknown command ' .. tostring(op))
	end
end

-- evaluate runs every command against the local table and returns the
-- reply, or a replayed reply, without writing anything.
local function evaluate()
	if hash ~= '' then
		local rec = get(KEYS_[1])
		if rec then
			if rec[1] ~= REPLAY or type(rec[3]) ~= 'string' or type(rec[4]) ~= 'table' then
				fail(CORRUPT, 'malformed replay record')
			end
			if rec[3] ~= hash then
				fail(CONFLICT, 'operation id reused with different commands')
			end
			local reply = {0, 1}
			for _, v in ipairs(rec[4]) do
				reply[#reply + 1] = v
			end
			return reply
		end
	end
	local n = tonum(ARGV_[7])
	if n == 1 and hash == '' and ARGV_[8] == 'hit' and ARGV_[10] == '1' then
		-- A lone hit of one window without a replay record: the compact
		-- reply (see prelude.lua), from a result table kept for it.
		current = 1
		local r = lone
		r[ALLOWED], r[REMAINING], r[RESET_AT], r[RETRY] = false, 0, 0, 0
		local ws = r[WINDOWS]
		ws[1] = nil
		run(arg(), r)
		current = 0
		local d = ws[1]
		denied = not r[ALLOWED]
		return {0, r[ALLOWED] and 1 or 0, d.remaining, d.resetAt, d.retry}
	end
	local reply = {0, 0, 0}
	for i = 1, n do
		current = i
		local r = newResult()
		run(arg(), r)
		if not r[ALLOWED] then
			reply[3], denied = 1, true
		end
		reply[3 + i] = encodeResult(r)
	end
	current = 0
	if hash ~= '' and mutated then
		-- The record keeps the reply after its first two elements.
		local body = {}
		for i = 3, n + 3 do
			body[i - 2] = reply[i]
		end
		put(KEYS_[1], {REPLAY, now + replayTTL, hash, body})
	end
	return reply
end

-- The encoded writes of a call, reused: a call reads only the first #order
-- entries, which it has set.
local packedT, ttlsT = {}, {}

-- MAX_EXACT_MS bounds an overridden clock (maxExactMs in keys.go).
local MAX_EXACT_MS = 4503599627370496

-- clock sets the call's clock from c, the call's ARGV[2], and reports
-- whether c is a clock: "", or an integer in decimal within ±2^52 (not
-- "nan", "1e12" or any other spelling tonumber reads).
local function clock(c)
	if c == '' then
		local t = redis.call('TIME')
		now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
		return true
	end
	if type(c) ~= 'string' or not string.find(c, '^%-?%d+$') then
		return false
	end
	now = tonumber(c)
	return now >= -MAX_EXACT_MS and now <= MAX_EXACT_MS
end

-- badClock is the failure reply to a call whose clock is not one.
local function badClock(c)
	return {INVALID, 0, 'clock ' .. string.format('%q', tostring(c)) .. ' is not an integer within 2^52 ms'}
end

-- begin sets the call's clock from argv[2] and empties the tables of the
-- previous call, which nothing keeps past it. It reports whether argv[2]
-- is a clock, as clock does.
local function begin(argv)
	if not clock(argv[2]) then
		return false
	end
	for k in pairs(cache) do
		cache[k] = nil
	end
	for k in pairs(written) do
		written[k] = nil
	end
	for i = #order, 1, -1 do
		order[i] = nil
	end
	return true
end

-- failed returns the reply to a batch whose evaluation raised err: the
-- failure reply {code, command, message} of a command that failed, or an
-- error reply.
local function failed(err)
	if type(err) == 'table' and err.sluice then
		return {err.sluice, current, err.msg}
	end
	if type(err) == 'table' and err.redis then
		return redis.error_reply(err.redis)
	end
	return redis.error_reply('ERR sluice batch script: ' .. tostring(err))
end

-- evaluateBatch evaluates the batch of keys and argv (argv[3] on, as
-- batch() reads them) against the tables, which it adds to, and returns
-- the reply, the failure reply {code, command, message}, or an error
-- reply where Redis refused a read.
local function evaluateBatch(keys, argv)
	KEYS_, ARGV_ = keys, argv
	prefix, hash, replayTTL, grace = argv[3], argv[4], tonum(argv[5]), tonum(argv[6])
	mutated, denied = false, false
	current, argi = 0, 8
	local ok, reply = pcall(evaluate)
	if not ok then
		return failed(reply)
	end
	return reply
end

-- writeAll issues every write the call's batches made: encoded, every one,
-- before the first is issued, so that nothing can fail half way through.
local function writeAll()
	local n = #order
	local packed, ttls = packedT, ttlsT
	for i = 1, n do
		local rec = cache[order[i]]
		if rec then
			packed[i], ttls[i] = cmsgpack.pack(rec), string.format('%d', max(1, rec[2] - now) + grace)
		else
			packed[i] = false
		end
	end
	for i = 1, n do
		if packed[i] then
			redis.call('SET', order[i], packed[i], 'PX', ttls[i])
		else
			redis.call('DEL', order[i])
		end
	end
end

-- joint runs a joint step: several batches, each on a partition of its
-- own, evaluated in turn against the state before the step (their keys
-- are distinct: each carries its partition's tag), whose writes are all
-- issued or, when any batch was denied or failed, none are. argv: JOINT,
-- the clock, the number of batches, then for each batch the number of its
-- keys, the number of its arguments and its arguments as batch() reads
-- them (the clock's left empty); keys: each batch's keys in turn. Reply:
-- {0, denied, reply...}, each batch's reply as batch() answers it, or
-- {code, command, message, batch} when a command of a batch failed. A
-- store runs joint steps only where every key is on one node: across a
-- cluster's slots Redis refuses the call (CROSSSLOT) before it runs.
local function joint(keys, argv)
	if not begin(argv) then
		return badClock(argv[2])
	end
	local reply = {0, 0}
	local ki, ai = 1, 4
	for b = 1, tonumber(argv[3]) do
		local nk, na = tonumber(argv[ai]), tonumber(argv[ai + 1])
		local bk, ba = {}, {}
		for i = 1, nk do
			bk[i] = keys[ki + i - 1]
		end
		for i = 1, na do
			ba[i] = argv[ai + 1 + i]
		end
		ki, ai = ki + nk, ai + 2 + na
		local r = evaluateBatch(bk, ba)
		if r[1] ~= 0 then
			if type(r[1]) == 'number' then
				r[4] = b
			end
			return r
		end
		if denied then
			reply[2] = 1
		end
		reply[2 + b] = r
	end
	if reply[2] == 0 then
		writeAll()
	end
	return reply
end

-- spec returns the numbers of a lone hit's spec, "<grace> <cost> <kind>
-- <limit> <window>" (see prelude.lua), memoised: a store sends the same
-- few specs (its limits) over and over, and one argument and one lookup
-- cost Redis less than five of each. Every call reads the array it
-- returns and none changes it. A spec that is not five decimal integers
-- (tonumber would also read "nan", "inf", "1e3", "0x10", "-1", "1.5")
-- within a hit's bounds, with a grace of at most MAX_WINDOW, is nil, and
-- never memoised.
local spec = memoised(function(s)
	if type(s) ~= 'string' then
		return nil
	end
	local g, c, k, l, w = string.match(s, '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
	if not g then
		return nil
	end
	g, c, k, l, w = tonumber(g), tonumber(c), tonumber(k), tonumber(l), tonumber(w)
	if g > MAX_WINDOW or not validHit(c, k, l, w) then
		return nil
	end
	return {g, c, k, l, w}
end)

-- SET ... KEEPTTL exists from Redis 6.0 on; the script uses it where
-- REDIS_VERSION_NUM, defined from 7.0 on, shows that it may (on 6.x the
-- expiry is set every time, as Redis 5 needs).
local KEEPTTL = redis.REDIS_VERSION_NUM ~= nil

-- loneHit runs a lone hit (argv[1] LONE; see prelude.lua): one win.hit on one
-- window without a replay record, the commonest batch, which needs none
-- of a batch's tables. Its record is read, evaluated, and then, when the
-- hit was admitted, written, as writeAll would write it; when its expiry
-- is the stored record's, whose physical expiry was set to it by the
-- write that stored it, the write keeps that expiry (KEEPTTL) rather than
-- setting the same instant again. Under an overridden clock (grace not
-- 0) the expiry is always set.
local function loneHit(keys, argv)
	if not clock(argv[2]) then
		return badClock(argv[2])
	end
	local sp = spec(argv[4])
	if not sp or #keys ~= 1 or #argv ~= 4 then
		return {INVALID, 1, 'malformed lone hit: ' .. #keys .. ' keys, spec ' .. string.format('%q', tostring(argv[4]))}
	end
	prefix, grace = argv[3], sp[1]
	if not windows then
		windows, hitOne = buildWindows(S)
	end
	local k = keys[1]
	current = 1
	local ok, allowed, remaining, resetAt, retry, rec, keep = pcall(hitOne, k, sp[2], sp[3], sp[4], sp[5])
	if not ok then
		return failed(allowed)
	end
	current = 0
	if rec then
		if keep and grace == 0 and KEEPTTL then
			redis.call('SET', k, cmsgpack.pack(rec), 'KEEPTTL')
		else
			redis.call('SET', k, cmsgpack.pack(rec), 'PX', string.format('%d', max(1, rec[2] - now) + grace))
		end
	end
	return {0, allowed and 1 or 0, remaining, resetAt, retry}
end

-- batch runs one batch, a lone hit (argv[1] LONE) or a joint step (argv[1]
-- JOINT): the entry point of both forms (see prelude.lua).
local function batch(keys, argv)
	local format = argv[1]
	if format == LONE then
		return loneHit(keys, argv)
	end
	if format == JOINT then
		return joint(keys, argv)
	end
	if format ~= FORMAT then
		return {INVALID, 0, 'script format ' .. FORMAT .. ', called with ' .. tostring(format)}
	end
	if not begin(argv) then
		return badClock(argv[2])
	end
	local reply = evaluateBatch(keys, argv)
	if reply[1] == 0 then
		writeAll()
	end
	return reply
end
