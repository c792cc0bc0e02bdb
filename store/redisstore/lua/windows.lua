-- Part of the batch script (see prelude.lua): win.hit over the four window kinds.

-- Windows (algo/window.go, algo/peek.go). A state is the window's record,
-- {kind, expireAt, fields...}, read as it is stored and stored as the hit
-- returns it, so that a hit builds no table to decode or encode it. Its
-- fields are s[3], s[4], ...: start, count (fixed); start, count, prev
-- (sliding); log, a flat array {at1, n1, at2, n2, ...} (log); tat, frac
-- (gcra). A hit returns the new record, whose expiry cmdHit sets, and its
-- decision as four values: allowed, remaining, resetAt, retry (so that a
-- lone hit builds no table for it).

-- The bounds of a hit (algo.Limit.Validate, ValidateCost). The batch code
-- checks every hit against them before it evaluates it, so that no hit the
-- Go side would refuse is ever evaluated: a limit of NaN, which tonumber
-- reads from "nan", compares false with every count and would admit every
-- hit.
local MAX_LOG_LIMIT = 4096 -- algo.MaxLogLimit
local MAX_WINDOW = 10368000000 -- algo.MaxWindow, 120 days in ms
local MAX_WINDOWS_PER_HIT = 4 -- engine.MaxWindowsPerHit

-- isWhole reports whether v is a number with no fraction (NaN is not;
-- infinities are, and every bound below excludes them).
local function isWhole(v)
	return type(v) == 'number' and v == floor(v)
end

-- validHit reports whether a hit of cost on a window of kind, limit and
-- window is within algo's bounds.
local function validHit(cost, kind, limit, window)
	if kind ~= 1 and kind ~= 2 and kind ~= 3 and kind ~= 4 then
		return false
	end
	local maxLimit = MAX_LIMIT
	if kind == 3 then
		maxLimit = MAX_LOG_LIMIT
	end
	return isWhole(limit) and limit >= 1 and limit <= maxLimit and isWhole(window) and window >= 1 and window <= MAX_WINDOW and
		isWhole(cost) and cost >= 1 and cost <= limit
end

local function buildWindows(S)
	local get, put, del, fail, wrongType, need, isNumber, value, key, arg, num, addWindow, name = S.get, S.put, S.del, S.fail, S.wrongType, S.need, S.isNumber, S.value, S.key, S.arg, S.num, S.addWindow, S.name
	local load = S.load
	-- Window kinds: algo.Kind, and the record kind each is stored as.
	local K_FIXED, K_SLIDING, K_LOG, K_GCRA = 1, 2, 3, 4
	local WINDOW_RECORD = {FIXED, SLIDING, LOG, GCRA}
	local EMPTY_LOG = {}

	-- divmod returns floor(n/d) and n mod d for integers |n| < 2^53, 0 < d < 2^53.
	-- The quotient of two doubles is rounded, so floor(n/d) is checked and
	-- corrected by the exact remainder.
	local function divmod(n, d)
		local q = floor(n / d)
		local r = n - q * d
		if r < 0 then
			q, r = q - 1, r + d
		elseif r >= d then
			q, r = q + 1, r - d
		end
		return q, r
	end

	-- muldiv returns floor(a·b/d) and a·b mod d exactly for 0 ≤ a, b < 2^41 and
	-- 0 < d < 2^41, where the product may reach 2^82 (bits.Mul64/Div64 in Go).
	-- It runs Horner's rule over b in 10-bit digits, keeping every intermediate
	-- below 2^52: r·2^10 + a·digit < 2^41·2^10 + 2^41·2^10.
	local function muldiv(a, b, d)
		if a * b < 9007199254740992 then
			-- The product is exact (below 2^53): divide it at once. Every
			-- limit and window up to a million and more takes this path.
			return divmod(a * b, d)
		end
		local digits, n = {}, 0
		repeat
			local rest, digit = divmod(b, 1024)
			n = n + 1
			digits[n] = digit
			b = rest
		until b == 0
		local q, r = 0, 0
		for i = n, 1, -1 do
			local qi, ri = divmod(r * 1024 + a * digits[i], d)
			q, r = q * 1024 + qi, ri
		end
		return q, r
	end

	-- The empty window of each kind; states are never changed in place
	-- once stored.
	local EMPTY = {{FIXED, 0, 0, 0}, {SLIDING, 0, 0, 0, 0}, {LOG, 0, EMPTY_LOG}, {GCRA, 0, 0, 0}}

	local isInt = S.isInt

	-- isCount reports whether v is a count a window may hold: 0 … MaxLimit.
	local function isCount(v)
		return isInt(v) and v >= 0 and v <= MAX_LIMIT
	end

	-- checkWindow checks that rec, a record of kind's window record kind,
	-- holds that kind's state, as algo.DecodeWindow does, and returns it: a
	-- stored record is its own state.
	local function checkWindow(key, kind, rec)
		local a, b, c = rec[3], rec[4], rec[5]
		if kind == K_FIXED then
			need(isInt(a) and isCount(b), key)
		elseif kind == K_SLIDING then
			need(isInt(a) and isCount(b) and isCount(c), key)
		elseif kind == K_LOG then
			need(type(a) == 'table' and #a % 2 == 0, key)
			-- Entries of 1 … MaxLimit, strictly in order of time.
			for i = 1, #a, 2 do
				local at, n = a[i], a[i + 1]
				need(isInt(at) and isCount(n) and n >= 1 and (i == 1 or at > a[i - 2]), key)
			end
		else
			need(isInt(a) and isInt(b) and b >= 0 and b < MAX_LIMIT, key)
		end
		return rec
	end

	local function bucketStart(t, w)
		if t < 0 then
			return 0
		end
		local _, r = divmod(t, w)
		return t - r
	end

	local function hitFixed(l, s, t, cost)
		t = max(t, s[3])
		local start = bucketStart(t, l.window)
		local count = s[4]
		if start ~= s[3] then
			count = 0
		end
		local e = start + l.window
		if count + cost > l.limit then
			return s, false, max(0, l.limit - count), e, e - t
		end
		count = count + cost
		return {FIXED, 0, start, count}, true, l.limit - count, e, 0
	end

	-- slidingEstimate is prev·(W−elapsed)/W + cur, rounded as in Go.
	local function slidingEstimate(prev, cur, w, elapsed)
		local weighted = prev * (w - elapsed)
		return weighted / w + cur
	end

	local function slidingRoll(l, s, t)
		local start = bucketStart(t, l.window)
		if start == s[3] then
			return start, s[4], s[5]
		elseif start == s[3] + l.window then
			return start, 0, s[4]
		end
		return start, 0, 0
	end

	local function remainingFloat(limit, used)
		local r = floor(limit - used)
		if r < 0 then
			return 0
		end
		return r
	end

	local function slidingRetry(l, start, cur, prev, t, cost)
		local W, L = l.window, l.limit
		local function admits(p, c, bucket, at)
			return slidingEstimate(p, c, W, at - bucket) + cost <= L
		end
		local function earliest(p, c, bucket, from)
			if c + cost > L then
				return -1
			end
			if p == 0 or admits(p, c, bucket, from) then
				return from
			end
			local e = bucket + W
			if not admits(p, c, bucket, e - 1) then
				return -1
			end
			local x = W - (L - c - cost) * W / p
			local at = min(max(from + 1, bucket + ceil(x)), e - 1)
			if admits(p, c, bucket, at) and not admits(p, c, bucket, at - 1) then
				return at
			end
			local lo, hi = from, e - 1
			while hi - lo > 1 do
				local mid = lo + floor((hi - lo) / 2)
				if admits(p, c, bucket, mid) then
					hi = mid
				else
					lo = mid
				end
			end
			return hi
		end
		local at = earliest(prev, cur, start, t)
		if at >= 0 then
			return at
		end
		local nxt = start + W
		at = earliest(cur, 0, nxt, nxt)
		if at >= 0 then
			return at
		end
		return nxt + W
	end

	local function hitSliding(l, s, t, cost)
		t = max(t, s[3])
		local start, cur, prev = slidingRoll(l, s, t)
		local est = slidingEstimate(prev, cur, l.window, t - start)
		if est + cost > l.limit then
			local resetAt = start + l.window
			if cur > 0 then
				resetAt = resetAt + l.window
			end
			return s, false, remainingFloat(l.limit, est), resetAt, slidingRetry(l, start, cur, prev, t, cost) - t
		end
		cur = cur + cost
		est = est + cost
		return {SLIDING, 0, start, cur, prev}, true, remainingFloat(l.limit, est), start + 2 * l.window, 0
	end

	local function hitLog(l, s, t, cost)
		local e = s[3]
		local n = #e / 2
		if n > 0 then
			t = max(t, e[2 * n - 1])
		end
		-- Entries at or before t−W have left the window (it is (t−W, t]).
		local first = 1
		while first <= n and e[2 * first - 1] <= t - l.window do
			first = first + 1
		end
		local used = 0
		for i = first, n do
			used = used + e[2 * i]
		end
		if used + cost > l.limit then
			local retry = 0
			local want = used + cost - l.limit
			for i = first, n do
				want = want - e[2 * i]
				if want <= 0 then
					retry = e[2 * i - 1] + l.window - t
					break
				end
			end
			return s, false, max(0, l.limit - used), e[2 * n - 1] + l.window, retry
		end
		local nx = {}
		for i = first, n do
			nx[#nx + 1] = e[2 * i - 1]
			nx[#nx + 1] = e[2 * i]
		end
		local m = #nx
		if m > 0 and nx[m - 1] == t then
			nx[m] = nx[m] + cost
		else
			nx[m + 1], nx[m + 2] = t, cost
		end
		return {LOG, 0, nx}, true, l.limit - used - cost, t + l.window, 0
	end

	-- GCRA keeps TAT as whole ms plus frac/limit ms (see algo/window.go).

	local function gcraStep(l, cost)
		local whole, part = divmod(cost, l.limit)
		local q, r = muldiv(part, l.window, l.limit)
		return whole * l.window + q, r
	end

	local function gcraCeil(tat, frac)
		if frac > 0 then
			return tat + 1
		end
		return tat
	end

	-- gcraRemaining is ⌊(W − (tat−t))·limit − frac)/W⌋, at most limit.
	local function gcraRemaining(l, tat, frac, t)
		local gap = l.window - (tat - t)
		if gap <= 0 then
			return 0
		end
		local q, r = muldiv(gap, l.limit, l.window)
		if r < frac then
			local borrow = divmod(frac - r + l.window - 1, l.window) -- ⌈(frac−r)/W⌉
			q = q - borrow
		end
		return min(q, l.limit)
	end

	local function hitGCRA(l, s, t, cost)
		local tat, frac = s[3], max(s[4], 0)
		if frac >= l.limit then
			tat, frac = tat + 1, 0
		end
		t = max(t, gcraCeil(tat, frac) - l.window)
		if tat < t then
			tat, frac = t, 0
		end
		local step, stepFrac = gcraStep(l, cost)
		local nx, nxFrac = tat + step, frac + stepFrac
		if nxFrac >= l.limit then
			nx, nxFrac = nx + 1, nxFrac - l.limit
		end
		local over = nx - t - l.window
		if over > 0 or (over == 0 and nxFrac > 0) then
			return s, false, gcraRemaining(l, tat, frac, t), gcraCeil(tat, frac), gcraCeil(over, nxFrac)
		end
		return {GCRA, 0, nx, nxFrac}, true, gcraRemaining(l, nx, nxFrac, t), gcraCeil(nx, nxFrac), 0
	end

	local HIT = {hitFixed, hitSliding, hitLog, hitGCRA}

	-- windowTTL is algo.Limit.TTL.
	local function windowTTL(l, s, t)
		if l.kind == K_FIXED then
			return s[3] + l.window - t
		elseif l.kind == K_SLIDING then
			return s[3] + 2 * l.window - t
		elseif l.kind == K_GCRA then
			return gcraCeil(s[3], s[4]) - t
		end
		local n = #s[3]
		if n > 0 then
			return s[3][n - 1] + l.window - t
		end
		return 0
	end

	-- peek is algo.Peek: the window at t, uncharged.
	local function peek(l, s, t)
		if l.kind == K_FIXED then
			t = max(t, s[3])
			local start = bucketStart(t, l.window)
			if start ~= s[3] or s[4] == 0 then
				return l.limit, t
			end
			return max(0, l.limit - s[4]), start + l.window
		elseif l.kind == K_SLIDING then
			t = max(t, s[3])
			local start, cur, prev = slidingRoll(l, s, t)
			local resetAt = t
			if cur > 0 then
				resetAt = start + 2 * l.window
			elseif prev > 0 then
				resetAt = start + l.window
			end
			return remainingFloat(l.limit, slidingEstimate(prev, cur, l.window, t - start)), resetAt
		elseif l.kind == K_LOG then
			local e = s[3]
			local n = #e / 2
			if n > 0 then
				t = max(t, e[2 * n - 1])
			end
			local used, last = 0, 0
			for i = 1, n do
				if e[2 * i - 1] > t - l.window then
					used, last = used + e[2 * i], e[2 * i - 1]
				end
			end
			if used == 0 then
				return l.limit, t
			end
			return max(0, l.limit - used), last + l.window
		end
		local tat, frac = s[3], max(s[4], 0)
		if frac >= l.limit then
			tat, frac = tat + 1, 0
		end
		t = max(t, gcraCeil(tat, frac) - l.window)
		if tat < t then
			return l.limit, t
		end
		return gcraRemaining(l, tat, frac, t), max(t, gcraCeil(tat, frac))
	end

	-- cmdHit's working arrays, indexed by window and reused by every hit
	-- (each reads only the first n entries it set): keys, limits (tables
	-- {kind, limit, window}, refilled in place), and states before and
	-- after the hit. A batch runs its commands one by one, and nothing
	-- outside cmdHit keeps these tables.
	local keys, limits, cur, nxt = {}, {}, {}, {}

	local function cmdHit(r)
		local cost, n = num(), num()
		if not isWhole(n) or n < 1 or n > MAX_WINDOWS_PER_HIT then
			fail(INVALID, 'hit of ' .. tostring(n) .. ' windows')
		end
		local ws = r[WINDOWS]
		for i = 1, n do
			local k = key()
			local l = limits[i]
			if not l then
				l = {}
				limits[i] = l
			end
			l.kind, l.limit, l.window = num(), num(), num()
			if k == nil or not validHit(cost, l.kind, l.limit, l.window) then
				fail(INVALID, 'hit of window ' .. i .. ' outside the bounds of a hit')
			end
			keys[i] = k
			local kind = WINDOW_RECORD[l.kind]
			local st = EMPTY[l.kind]
			local rec = get(k)
			if rec then
				if rec[1] ~= kind then
					wrongType(k, rec[1], kind)
				end
				st = checkWindow(k, l.kind, rec)
			end
			cur[i] = st
			local s2, allowed, remaining, resetAt, retry = HIT[l.kind](l, st, now, cost)
			nxt[i], ws[i] = s2, {allowed = allowed, remaining = remaining, resetAt = resetAt, retry = retry}
		end
		local allowed, retry = true, 0
		for i = 1, n do
			local d = ws[i]
			allowed = allowed and d.allowed
			retry = max(retry, d.retry)
		end
		local remaining, resetAt = MAX_LIMIT, 0
		for i = 1, n do
			local d = ws[i]
			if not allowed and d.allowed then
				-- This window would have admitted the hit but was not charged:
				-- report it as it stands.
				d.remaining, d.resetAt = peek(limits[i], cur[i], now)
			end
			remaining = min(remaining, d.remaining)
			resetAt = max(resetAt, d.resetAt)
		end
		r[ALLOWED], r[REMAINING], r[RESET_AT], r[RETRY] = allowed, remaining, resetAt, retry
		if not allowed then
			return
		end
		for i = 1, n do
			-- Every admitting hit returned a new state: set its expiry.
			local st = nxt[i]
			st[2] = now + max(1, windowTTL(limits[i], st, now))
			put(keys[i], st)
		end
	end

	-- hitOne is a lone hit: one window, read without the batch's table of
	-- records (the batch has no other command), the same transition as
	-- cmdHit's for one window. It returns the decision (allowed,
	-- remaining, resetAt, retry), then, when the hit was admitted, the new
	-- record with its expiry set and whether that expiry is the stored
	-- record's. It writes nothing.
	local one = {} -- the lone hit's limit, refilled by every call
	local function hitOne(k, cost, kind, limit, window)
		one.kind, one.limit, one.window = kind, limit, window
		local rk = WINDOW_RECORD[kind]
		local st = EMPTY[kind]
		local rec = load(k)
		if rec and rec[2] > now then
			if rec[1] ~= rk then
				wrongType(k, rec[1], rk)
			end
			st = checkWindow(k, kind, rec)
		else
			rec = nil
		end
		local nx, allowed, remaining, resetAt, retry = HIT[kind](one, st, now, cost)
		if not allowed then
			return false, remaining, resetAt, retry
		end
		nx[2] = now + max(1, windowTTL(one, nx, now))
		return true, remaining, resetAt, retry, nx, rec ~= nil and nx[2] == rec[2]
	end

	return cmdHit, hitOne
end
