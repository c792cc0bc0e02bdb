-- Part of the batch script (see prelude.lua): pace.take, pace.claim and pace.penalize.

-- Paced limiter (algo/pace.go). A state is {forced, hold, penalizedAt,
-- log} with log a flat array {at1, n1, ...} sorted by at. The hold is the
-- phantom spend at forced that a penalty carries, kept out of the log.

local function buildPace(S)
	local get, put, del, fail, wrongType, need, isNumber, value, key, arg, num, addWindow, name = S.get, S.put, S.del, S.fail, S.wrongType, S.need, S.isNumber, S.value, S.key, S.arg, S.num, S.addWindow, S.name
	local EMPTY_LOG = {}

	local function paceUsed(l, st, t)
		local n, log = 0, st.log
		for i = 1, #log, 2 do
			if log[i] > t - l.window then
				n = n + log[i + 1]
			end
		end
		if st.forced > t - l.window then
			n = n + st.hold
		end
		return n
	end

	local function paceFloor(l)
		return l.limit - floor(l.limit * l.refill / 1000)
	end

	local function paceCounted(l, st)
		local n, log = 0, st.log
		for i = 1, #log, 2 do
			if log[i] > st.penalizedAt then
				break
			end
			if log[i] > st.forced - l.window then
				n = n + log[i + 1]
			end
		end
		return n
	end

	local function pacePruned(l, st, t)
		local out = {}
		local i = 1
		while i <= #st.log and st.log[i] <= t - l.window do
			i = i + 2
		end
		for j = i, #st.log do
			out[#out + 1] = st.log[j]
		end
		local nx = {forced = st.forced, hold = st.hold, penalizedAt = st.penalizedAt, log = out}
		if st.forced <= t - l.window then
			nx.hold, nx.penalizedAt = 0, 0
		end
		return nx
	end

	local function paceSlot(l, st, from, cost)
		local want = paceUsed(l, st, from) + cost - l.limit
		if want <= 0 then
			return from
		end
		local log, hold = st.log, st.hold
		if st.forced <= from - l.window then
			hold = 0
		end
		for i = 1, #log, 2 do
			if hold > 0 and st.forced <= log[i] then
				want = want - hold
				if want <= 0 then
					return max(from, st.forced + l.window)
				end
				hold = 0
			end
			if log[i] > from - l.window then
				want = want - log[i + 1]
				if want <= 0 then
					return max(from, log[i] + l.window)
				end
			end
		end
		if hold > 0 and want - hold <= 0 then
			return max(from, st.forced + l.window)
		end
		return from
	end

	local function paceResetAt(l, st, t)
		local r = max(t, st.forced)
		local n = #st.log
		if n > 0 then
			r = max(t, st.log[n - 1] + l.window)
		end
		if st.hold > 0 then
			r = max(r, st.forced + l.window)
		end
		return r
	end

	local function addEntry(log, at, n)
		local out, i = {}, 1
		while i <= #log and log[i] < at do
			out[#out + 1], out[#out + 2] = log[i], log[i + 1]
			i = i + 2
		end
		if i <= #log and log[i] == at then
			out[#out + 1], out[#out + 2] = at, log[i + 1] + n
			i = i + 2
		else
			out[#out + 1], out[#out + 2] = at, n
		end
		for j = i, #log do
			out[#out + 1] = log[j]
		end
		return out
	end

	-- removeEntry returns the log with up to n units removed at at, and how
	-- many were.
	local function removeEntry(log, at, n)
		local out, removed = {}, 0
		for i = 1, #log, 2 do
			local a, c = log[i], log[i + 1]
			if a == at then
				removed = min(c, n)
				c = c - removed
			end
			if c > 0 then
				out[#out + 1], out[#out + 2] = a, c
			end
		end
		return out, removed
	end

	local function paceTake(l, st, t, cost, maxWait)
		local cur = pacePruned(l, st, t)
		local from = max(t, st.forced)
		if #cur.log > 0 then
			from = max(from, cur.log[#cur.log - 1])
		end
		local at = paceSlot(l, cur, from, cost)
		local d = {allowed = false, at = at, remaining = 0, resetAt = 0, retry = 0}
		if at - t > maxWait then
			d.remaining = max(0, l.limit - paceUsed(l, cur, t))
			d.resetAt = paceResetAt(l, cur, t)
			d.retry = at - t
			return st, d
		end
		local nx = {forced = cur.forced, hold = cur.hold, penalizedAt = cur.penalizedAt, log = addEntry(cur.log, at, cost)}
		d.allowed = true
		d.remaining = max(0, l.limit - paceUsed(l, nx, t))
		d.resetAt = paceResetAt(l, nx, t)
		return nx, d
	end

	local function paceClaim(l, st, t, at, cost, maxWait)
		if t < at then
			return st, {allowed = false, at = at, remaining = max(0, l.limit - paceUsed(l, st, t)),
				resetAt = paceResetAt(l, st, t), retry = at - t}
		end
		if at >= st.forced then
			return st, {allowed = true, at = at, remaining = max(0, l.limit - paceUsed(l, st, t)),
				resetAt = paceResetAt(l, st, t), retry = 0}
		end
		local log, removed = removeEntry(st.log, at, cost)
		local moved = {forced = st.forced, hold = st.hold, penalizedAt = st.penalizedAt, log = log}
		if removed > 0 and at <= st.penalizedAt and at > st.forced - l.window and st.forced > t - l.window then
			moved.hold = max(moved.hold, paceFloor(l) - paceCounted(l, moved))
		end
		local nx, d = paceTake(l, moved, t, cost, maxWait)
		if not d.allowed then
			d.remaining = max(0, l.limit - paceUsed(l, nx, t))
		end
		return nx, d
	end

	local function pacePenalize(l, st, t, untilAt)
		if untilAt <= st.forced or untilAt <= t then
			return st
		end
		local nx = {forced = untilAt, hold = 0, penalizedAt = t, log = pacePruned(l, st, t).log}
		nx.hold = max(0, paceFloor(l) - paceCounted(l, nx))
		if st.forced > untilAt - l.window then
			nx.hold = max(nx.hold, st.hold)
		end
		return nx
	end

	local function paceExpireAt(l, st)
		local t = st.forced
		if st.hold > 0 then
			t = t + l.window
		end
		local n = #st.log
		if n > 0 then
			t = max(t, st.log[n - 1] + l.window)
		end
		return t
	end

	local function cmdPace(op, r)
		local k = key()
		local l = {limit = num(), window = num(), refill = num()}
		local st = {forced = 0, hold = 0, penalizedAt = 0, log = EMPTY_LOG}
		local rec = get(k)
		if rec then
			if rec[1] ~= PACE then
				wrongType(k, rec[1], PACE)
			end
			-- {PACE, expireAt, forced, log, hold, penalizedAt}: a record
			-- written before the hold existed ends at the log and reads as
			-- a state without one.
			st.forced, st.log, st.hold, st.penalizedAt = rec[3], rec[4], rec[5] or 0, rec[6] or 0
			need(isNumber(st.forced) and type(st.log) == 'table' and #st.log % 2 == 0 and isNumber(st.hold) and isNumber(st.penalizedAt), k)
		end
		local nx, changed
		if op == 'take' or op == 'claim' then
			local at, cost, maxWait = 0, num(), num()
			if op == 'claim' then
				at = num()
			end
			local d
			if op == 'take' then
				nx, d = paceTake(l, st, now, cost, maxWait)
				changed = d.allowed
			else
				nx, d = paceClaim(l, st, now, at, cost, maxWait)
				-- A claim changes the log only when a penalty moved its slot.
				changed = now >= at and at < st.forced
			end
			r[ALLOWED], r[AT], r[REMAINING], r[RESET_AT], r[RETRY] = d.allowed, d.at, d.remaining, d.resetAt, d.retry
		else
			local delay = num()
			nx = pacePenalize(l, st, now, now + delay)
			r[ALLOWED], r[AT] = true, nx.forced
			r[REMAINING] = max(0, l.limit - paceUsed(l, nx, now))
			changed = nx.forced ~= st.forced
		end
		if changed then
			put(k, {PACE, max(now + 1, paceExpireAt(l, nx)), nx.forced, nx.log, nx.hold, nx.penalizedAt})
		end
	end

	return cmdPace
end
