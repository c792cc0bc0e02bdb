-- Part of the batch script (see prelude.lua): the kv.* commands but kv.incr.

-- Values (engine/exec.go).

local function buildValues(S)
	local get, put, del, fail, wrongType, need, isNumber, value, key, arg, num, addWindow, name = S.get, S.put, S.del, S.fail, S.wrongType, S.need, S.isNumber, S.value, S.key, S.arg, S.num, S.addWindow, S.name

	local function cmdGet(r)
		local rec = value(key())
		r[ALLOWED] = true
		if rec then
			r[FOUND], r[VAL] = true, rec[3]
		end
	end

	local function cmdSet(r)
		local k, v, mode, keep, ttl = key(), arg(), arg(), arg() == '1', num()
		local rec = value(k)
		if mode == 'nx' then
			r[ALLOWED] = rec == nil
		elseif mode == 'xx' then
			r[ALLOWED] = rec ~= nil
		else
			r[ALLOWED] = true
		end
		r[FOUND] = rec ~= nil
		if not r[ALLOWED] then
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
		r[ALLOWED] = true
		if get(k) then
			r[FOUND] = true
			del(k)
		end
	end

	local function cmdTTL(r)
		local rec = get(key())
		r[ALLOWED] = true
		if rec then
			r[FOUND], r[TTL] = true, rec[2] - now
		end
	end

	local function cmdExpire(r)
		local k, ttl = key(), num()
		local rec = value(k)
		r[ALLOWED] = true
		if rec then
			r[FOUND] = true
			put(k, {VALUE, now + ttl, rec[3]})
		end
	end

	return {get = cmdGet, set = cmdSet, del = cmdDel, ttl = cmdTTL, expire = cmdExpire}
end
