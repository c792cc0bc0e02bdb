-- Part of the batch script (see prelude.lua): pace.take, pace.claim and pace.penalize.

-- Paced limiter (algo/pace.go). A state is {forced, log} with log a flat
-- array {at1, n1, ...} sorted by at.

local function buildPace(S)
	local get, put, del, fail, wrongType, need, isNumber, value, key, arg, num, addWindow, name = S.get, S.put, S.del, S.fail, S.wrongType, S.need, S.isNumber, S.value, S.key, S.arg, S.num, S.addWindow, S.name
	local EMPTY_LOG = {}

	local function paceUsed(l, log, t)
		local n = 0
		for i = 1, #log, 2 do
			if log[i] > t - l.window then
				n = n + log[i + 1]
			end
		end
		return n
	end

	local function pacePrune(l, log, t)
		local out = {}
		local i = 1
		while i <= #log and log[i] <= t - l.window do
			i = i + 2
		end
		for j = i, #log do
			out[#out + 1] = log[j]
		end
		return out
	end

	local function paceSlot(l, log, from, cost)
		local want = paceUsed(l, log, from) + cost - l.limit
		if want <= 0 then
			return from
		end
		for i = 1, #log, 2 do
			if log[i] > from - l.window then
				want = want - log[i + 1]
				if want <= 0 then
					return max(from, log[i] + l.window)
				end
			end
		end
		return from
	end

	local function paceResetAt(l, st, t)
		local n = #st.log
		if n > 0 then
			return max(t, st.log[n - 1] + l.window)
		end
		return max(t, st.forced)
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

	local function removeEntry(log, at, n)
		local out = {}
		for i = 1, #log, 2 do
			local a, c = log[i], log[i + 1]
			if a == at then
				c = c - n
			end
			if a ~= at or c > 0 then
				out[#out + 1], out[#out + 2] = a, c
			end
		end
		return out
	end

	local function paceTake(l, st, t, cost, maxWait)
		local log = pacePrune(l, st.log, t)
		local cur = {forced = st.forced, log = log}
		local from = max(t, st.forced)
		if #log > 0 then
			from = max(from, log[#log - 1])
		end
		local at = paceSlot(l, log, from, cost)
		local d = {allowed = false, at = at, remaining = 0, resetAt = 0, retry = 0}
		if at - t > maxWait then
			d.remaining = max(0, l.limit - paceUsed(l, log, t))
			d.resetAt = paceResetAt(l, cur, t)
			d.retry = at - t
			return st, d
		end
		local nx = {forced = st.forced, log = addEntry(log, at, cost)}
		d.allowed = true
		d.remaining = max(0, l.limit - paceUsed(l, nx.log, t))
		d.resetAt = paceResetAt(l, nx, t)
		return nx, d
	end

	local function paceKeepFloor(l, st)
		local floorSpend = l.limit - floor(l.limit * l.refill / 1000)
		local phantom = floorSpend - paceUsed(l, st.log, st.forced)
		if phantom > 0 then
			return {forced = st.forced, log = addEntry(st.log, st.forced, phantom)}
		end
		return {forced = st.forced, log = st.log}
	end

	local function paceClaim(l, st, t, at, cost, maxWait)
		if t < at then
			return st, {allowed = false, at = at, remaining = max(0, l.limit - paceUsed(l, st.log, t)),
				resetAt = paceResetAt(l, st, t), retry = at - t}
		end
		if at >= st.forced then
			return st, {allowed = true, at = at, remaining = max(0, l.limit - paceUsed(l, st.log, t)),
				resetAt = paceResetAt(l, st, t), retry = 0}
		end
		local moved = {forced = st.forced, log = removeEntry(st.log, at, cost)}
		local nx, d = paceTake(l, moved, t, cost, maxWait)
		if not d.allowed then
			nx = paceKeepFloor(l, moved)
			d.remaining = max(0, l.limit - paceUsed(l, nx.log, t))
		end
		return nx, d
	end

	local function pacePenalize(l, st, t, untilAt)
		if untilAt <= st.forced or untilAt <= t then
			return st
		end
		return paceKeepFloor(l, {forced = untilAt, log = pacePrune(l, st.log, t)})
	end

	local function paceExpireAt(l, st)
		local t = st.forced
		local n = #st.log
		if n > 0 then
			t = max(t, st.log[n - 1] + l.window)
		end
		return t
	end

	local function cmdPace(op, r)
		local k = key()
		local l = {limit = num(), window = num(), refill = num()}
		local st = {forced = 0, log = EMPTY_LOG}
		local rec = get(k)
		if rec then
			if rec[1] ~= PACE then
				wrongType(k, rec[1], PACE)
			end
			st.forced, st.log = rec[3], rec[4]
			need(isNumber(st.forced) and type(st.log) == 'table' and #st.log % 2 == 0, k)
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
			r[REMAINING] = max(0, l.limit - paceUsed(l, nx.log, now))
			changed = nx.forced ~= st.forced
		end
		if changed then
			put(k, {PACE, max(now + 1, paceExpireAt(l, nx)), nx.forced, nx.log})
		end
	end

	return cmdPace
end
