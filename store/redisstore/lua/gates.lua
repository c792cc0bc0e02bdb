-- Part of the batch script (see prelude.lua): gate.acquire, gate.renew and gate.release.

-- Gates (algo/gate.go). Leases are a flat array {expireAt1, id1, ...}.

local function buildGates(S)
	local get, put, del, fail, wrongType, need, isNumber, value, key, arg, num, addWindow, name = S.get, S.put, S.del, S.fail, S.wrongType, S.need, S.isNumber, S.value, S.key, S.arg, S.num, S.addWindow, S.name

	local function decodeGate(k, rec)
		local flat = rec[3]
		need(type(flat) == 'table' and #flat % 2 == 0, k)
		local leases = {}
		for i = 1, #flat, 2 do
			-- algo.DecodeGate: a lease id of at most algo.MaxLeaseID bytes.
			need(S.isInt(flat[i]) and type(flat[i + 1]) == 'string' and #flat[i + 1] <= 64, k)
			leases[#leases + 1] = {id = flat[i + 1], exp = flat[i]}
		end
		return leases
	end

	local function liveLeases(leases, t)
		local out = {}
		for _, l in ipairs(leases) do
			if l.exp > t then
				out[#out + 1] = {id = l.id, exp = l.exp}
			end
		end
		return out
	end

	local function latest(leases)
		local t = 0
		for _, l in ipairs(leases) do
			t = max(t, l.exp)
		end
		return t
	end

	local function cmdGate(op, r)
		local k, lease = key(), arg()
		local leases = {}
		local rec = get(k)
		if rec then
			if rec[1] ~= GATE then
				wrongType(k, rec[1], GATE)
			end
			leases = decodeGate(k, rec)
		end
		local nx, changed
		if op == 'acquire' then
			local limit, ttl = num(), num()
			nx = liveLeases(leases, now)
			r[REMAINING] = 0
			local held = false
			for _, l in ipairs(nx) do
				if l.id == lease then
					l.exp = max(l.exp, now + ttl)
					held = true
				end
			end
			if held then
				r[ALLOWED], r[REMAINING], r[RESET_AT] = true, max(0, limit - #nx), latest(nx)
			elseif #nx >= limit then
				local earliest = nx[1].exp
				for _, l in ipairs(nx) do
					earliest = min(earliest, l.exp)
				end
				r[RESET_AT], r[RETRY] = latest(nx), earliest - now
			else
				nx[#nx + 1] = {id = lease, exp = now + ttl}
				r[ALLOWED], r[REMAINING], r[RESET_AT] = true, limit - #nx, latest(nx)
			end
			changed = r[ALLOWED]
		elseif op == 'renew' then
			local ttl = num()
			nx = liveLeases(leases, now)
			for _, l in ipairs(nx) do
				if l.id == lease then
					l.exp = max(l.exp, now + ttl)
					r[FOUND] = true
				end
			end
			if not r[FOUND] then
				nx = leases
			end
			r[ALLOWED], changed, r[RESET_AT] = true, r[FOUND], latest(nx)
		else
			nx = liveLeases(leases, now)
			for i, l in ipairs(nx) do
				if l.id == lease then
					table.remove(nx, i)
					r[FOUND] = true
					break
				end
			end
			r[ALLOWED], changed = true, r[FOUND]
		end
		if not changed then
			return
		end
		if #nx == 0 then
			del(k)
			return
		end
		local flat = {}
		for _, l in ipairs(nx) do
			flat[#flat + 1], flat[#flat + 2] = l.exp, l.id
		end
		put(k, {GATE, latest(nx), flat})
	end

	return cmdGate
end
