-- Part of the batch script (see prelude.lua): win.hit over the four window kinds.

-- Windows (algo/window.go, algo/peek.go). A state holds its kind's fields:
-- {start, count} (fixed), {start, count, prev} (sliding), {log} (log, a flat
-- array {at1, n1, at2, n2, ...}), {tat, frac} (gcra).

local function buildWindows(S)
	local get, put, del, fail, wrongType, need, isNumber, value, key, arg, num, addWindow, name = S.get, S.put, S.del, S.fail, S.wrongType, S.need, S.isNumber, S.value, S.key, S.arg, S.num, S.addWindow, S.name
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

	-- The empty window of each kind; states are never changed in place.
	local EMPTY = {{start = 0, count = 0}, {start = 0, count = 0, prev = 0}, {log = EMPTY_LOG}, {tat = 0, frac = 0}}

	local function decodeWindow(key, kind, rec)
		local a, b, c = rec[3], rec[4], rec[5]
		if kind == K_FIXED then
			need(isNumber(a) and isNumber(b), key)
			return {start = a, count = b}
		elseif kind == K_SLIDING then
			need(isNumber(a) and isNumber(b) and isNumber(c), key)
			return {start = a, count = b, prev = c}
		elseif kind == K_LOG then
			need(type(a) == 'table' and #a % 2 == 0, key)
			return {log = a}
		end
		need(isNumber(a) and isNumber(b) and b >= 0 and b < MAX_LIMIT, key)
		return {tat = a, frac = b}
	end

	local function encodeWindow(kind, expireAt, s)
		if kind == K_FIXED then
			return {FIXED, expireAt, s.start, s.count}
		elseif kind == K_SLIDING then
			return {SLIDING, expireAt, s.start, s.count, s.prev}
		elseif kind == K_LOG then
			return {LOG, expireAt, s.log}
		end
		return {GCRA, expireAt, s.tat, s.frac}
	end

	local function bucketStart(t, w)
		if t < 0 then
			return 0
		end
		local _, r = divmod(t, w)
		return t - r
	end

	local function hitFixed(l, s, t, cost)
		t = max(t, s.start)
		local start = bucketStart(t, l.window)
		local count = s.count
		if start ~= s.start then
			count = 0
		end
		local e = start + l.window
		if count + cost > l.limit then
			return s, {allowed = false, remaining = max(0, l.limit - count), resetAt = e, retry = e - t}
		end
		count = count + cost
		return {start = start, count = count}, {allowed = true, remaining = l.limit - count, resetAt = e, retry = 0}
	end

	-- slidingEstimate is prev·(W−elapsed)/W + cur, rounded as in Go.
	local function slidingEstimate(prev, cur, w, elapsed)
		local weighted = prev * (w - elapsed)
		return weighted / w + cur
	end

	local function slidingRoll(l, s, t)
		local start = bucketStart(t, l.window)
		if start == s.start then
			return start, s.count, s.prev
		elseif start == s.start + l.window then
			return start, 0, s.count
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
		t = max(t, s.start)
		local start, cur, prev = slidingRoll(l, s, t)
		local est = slidingEstimate(prev, cur, l.window, t - start)
		if est + cost > l.limit then
			local resetAt = start + l.window
			if cur > 0 then
				resetAt = resetAt + l.window
			end
			return s, {allowed = false, remaining = remainingFloat(l.limit, est), resetAt = resetAt,
				retry = slidingRetry(l, start, cur, prev, t, cost) - t}
		end
		cur = cur + cost
		est = est + cost
		return {start = start, count = cur, prev = prev}, {allowed = true, remaining = remainingFloat(l.limit, est), resetAt = start + 2 * l.window, retry = 0}
	end

	local function hitLog(l, s, t, cost)
		local e = s.log
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
			local d = {allowed = false, remaining = max(0, l.limit - used), resetAt = e[2 * n - 1] + l.window, retry = 0}
			local want = used + cost - l.limit
			for i = first, n do
				want = want - e[2 * i]
				if want <= 0 then
					d.retry = e[2 * i - 1] + l.window - t
					break
				end
			end
			return s, d
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
		return {log = nx}, {allowed = true, remaining = l.limit - used - cost, resetAt = t + l.window, retry = 0}
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
		local tat, frac = s.tat, max(s.frac, 0)
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
			return s, {allowed = false, remaining = gcraRemaining(l, tat, frac, t), resetAt = gcraCeil(tat, frac),
				retry = gcraCeil(over, nxFrac)}
		end
		return {tat = nx, frac = nxFrac}, {allowed = true, remaining = gcraRemaining(l, nx, nxFrac, t), resetAt = gcraCeil(nx, nxFrac), retry = 0}
	end

	local HIT = {hitFixed, hitSliding, hitLog, hitGCRA}

	-- windowTTL is algo.Limit.TTL.
	local function windowTTL(l, s, t)
		if l.kind == K_FIXED then
			return s.start + l.window - t
		elseif l.kind == K_SLIDING then
			return s.start + 2 * l.window - t
		elseif l.kind == K_GCRA then
			return gcraCeil(s.tat, s.frac) - t
		end
		local n = #s.log
		if n > 0 then
			return s.log[n - 1] + l.window - t
		end
		return 0
	end

	-- peek is algo.Peek: the window at t, uncharged.
	local function peek(l, s, t)
		if l.kind == K_FIXED then
			t = max(t, s.start)
			local start = bucketStart(t, l.window)
			if start ~= s.start or s.count == 0 then
				return l.limit, t
			end
			return max(0, l.limit - s.count), start + l.window
		elseif l.kind == K_SLIDING then
			t = max(t, s.start)
			local start, cur, prev = slidingRoll(l, s, t)
			local resetAt = t
			if cur > 0 then
				resetAt = start + 2 * l.window
			elseif prev > 0 then
				resetAt = start + l.window
			end
			return remainingFloat(l.limit, slidingEstimate(prev, cur, l.window, t - start)), resetAt
		elseif l.kind == K_LOG then
			local e = s.log
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
		local tat, frac = s.tat, max(s.frac, 0)
		if frac >= l.limit then
			tat, frac = tat + 1, 0
		end
		t = max(t, gcraCeil(tat, frac) - l.window)
		if tat < t then
			return l.limit, t
		end
		return gcraRemaining(l, tat, frac, t), max(t, gcraCeil(tat, frac))
	end

	local function cmdHit(r)
		local cost, n = num(), num()
		local keys, limits, cur, nxt = {}, {}, {}, {}
		for i = 1, n do
			local k = key()
			local l = {kind = num(), limit = num(), window = num()}
			keys[i], limits[i] = k, l
			local kind = WINDOW_RECORD[l.kind]
			local st = EMPTY[l.kind]
			local rec = get(k)
			if rec then
				if rec[1] ~= kind then
					wrongType(k, rec[1], kind)
				end
				st = decodeWindow(k, l.kind, rec)
			end
			cur[i] = st
			local d
			nxt[i], d = HIT[l.kind](l, st, now, cost)
			addWindow(r, d)
		end
		r.allowed, r.remaining = true, MAX_LIMIT
		for _, d in ipairs(r.windows) do
			r.allowed = r.allowed and d.allowed
			r.retry = max(r.retry, d.retry)
		end
		for i, d in ipairs(r.windows) do
			if not r.allowed and d.allowed then
				-- This window would have admitted the hit but was not charged:
				-- report it as it stands.
				d.remaining, d.resetAt = peek(limits[i], cur[i], now)
			end
			r.remaining = min(r.remaining, d.remaining)
			r.resetAt = max(r.resetAt, d.resetAt)
		end
		if not r.allowed then
			return
		end
		for i, l in ipairs(limits) do
			put(keys[i], encodeWindow(l.kind, now + max(1, windowTTL(l, nxt[i], now)), nxt[i]))
		end
	end

	return cmdHit
end
