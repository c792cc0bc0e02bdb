-- Part of the batch script (see prelude.lua): the kv.* commands but kv.incr.

-- Values (engine/exec.go).

local function buildValues(S)
	local get, put, del, fail, wrongType, need, isNumber, value, key, arg, num, addWindow, name = S.get, S.put, S.del, S.fail, S.wrongType, S.need, S.isNumber, S.value, S.key, S.arg, S.num, S.addWindow, S.name

	local function cmdGet(r)
		local rec = value(key())
		r.allowed = true
		if rec then
			r.found, r.value = true, rec[3]
		end
	end

	local function cmdSet(r)
		local k, v, mode, keep, ttl = key(), arg(), arg(), arg() == '1', num()
		local rec = value(k)
		if mode == 'nx' then
			r.allowed = rec == nil
		elseif mode == 'xx' then
			r.allowed = rec ~= nil
		else
			r.allowed = true
		end
		r.found = rec ~= nil
		if not r.allowed then
			return
		end
		local expireAt = now + ttl
		if keep and rec then
			expireAt = rec[2]
		end
		put(k, {VALUE, expireAt, v})
	end

	local function cmdDel(r)
		local k = key()
		r.allowed = true
		if get(k) then
			r.found = true
			del(k)
		end
	end

	local function cmdTTL(r)
		local rec = get(key())
		r.allowed = true
		if rec then
			r.found, r.ttl = true, rec[2] - now
		end
	end

	local function cmdExpire(r)
		local k, ttl = key(), num()
		local rec = value(k)
		r.allowed = true
		if rec then
			r.found = true
			put(k, {VALUE, now + ttl, rec[3]})
		end
	end

	return {get = cmdGet, set = cmdSet, del = cmdDel, ttl = cmdTTL, expire = cmdExpire}
end
