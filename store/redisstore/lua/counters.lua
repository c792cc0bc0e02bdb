-- Part of the batch script (see prelude.lua): kv.incr and the exact int64 arithmetic of counters.

-- Counters (algo/counter.go): int64 decimal strings, exact.

local function buildCounters(S)
	local get, put, del, fail, wrongType, need, isNumber, value, key, arg, num, addWindow, name = S.get, S.put, S.del, S.fail, S.wrongType, S.need, S.isNumber, S.value, S.key, S.arg, S.num, S.addWindow, S.name

	-- Counters are int64 decimal strings. limbs splits a canonical one into
	-- signed high and low parts of the same sign: v = hi·10^9 + lo.
	local function limbs(s)
		local neg = string.byte(s, 1) == 45 -- '-'
		local mag = neg and string.sub(s, 2) or s
		local hi, lo = 0, tonumber(mag)
		if #mag > 9 then
			hi, lo = tonumber(string.sub(mag, 1, #mag - 9)), tonumber(string.sub(mag, -9))
		end
		if neg then
			return -hi, -lo
		end
		return hi, lo
	end

	-- addInt returns a+b for decimal int64 strings, or nil when the sum leaves
	-- the int64 range (algo.AddInt).
	local function addInt(a, b)
		local ah, al = limbs(a)
		local bh, bl = limbs(b)
		local h, l = ah + bh, al + bl
		if l >= 1e9 then
			h, l = h + 1, l - 1e9
		elseif l <= -1e9 then
			h, l = h - 1, l + 1e9
		end
		if h > 0 and l < 0 then
			h, l = h - 1, l + 1e9
		elseif h < 0 and l > 0 then
			h, l = h + 1, l - 1e9
		end
		local neg = h < 0 or (h == 0 and l < 0)
		if neg then
			h, l = -h, -l
		end
		-- |int64| ≤ 9223372036854775807, or …808 when negative.
		if h > 9223372036 or (h == 9223372036 and l > (neg and 854775808 or 854775807)) then
			return nil
		end
		local s
		if h > 0 then
			s = string.format('%d%09d', h, l)
		else
			s = string.format('%d', l)
		end
		if neg then
			s = '-' .. s
		end
		return s
	end

	-- digitsAbove reports whether the digit string a is greater than b, both
	-- of the same length (compared byte by byte: string comparison in Lua
	-- follows the server's locale).
	local function digitsAbove(a, b)
		for i = 1, #a do
			local x, y = string.byte(a, i), string.byte(b, i)
			if x ~= y then
				return x > y
			end
		end
		return false
	end

	-- parseCounter returns the canonical text of a counter value, or nil when
	-- it is not one (algo.ParseCounter): base 10, int64, an optional '-', no
	-- '+', no leading zeros. An empty value is zero.
	local function parseCounter(v)
		if v == '' or v == '0' then
			return '0'
		end
		if not string.find(v, '^%-?[1-9]%d*$') then
			return nil
		end
		local neg = string.byte(v, 1) == 45
		local mag = neg and string.sub(v, 2) or v
		if #mag > 19 or (#mag == 19 and digitsAbove(mag, neg and '9223372036854775808' or '9223372036854775807')) then
			return nil
		end
		return v
	end

	-- counterNumber returns a budget's counter as a number when every sum a
	-- reservation forms with it stays exact (|v| ≤ 2^52, so that v ± 2^40 <
	-- 2^53), math.huge for a larger value (which exceeds every limit, as the
	-- exact value does), or nil for a smaller one.
	local function counterNumber(s)
		local h, l = limbs(s)
		if h > 4503599 or (h == 4503599 and l > 627370496) then
			return math.huge
		end
		if h < -4503599 or (h == -4503599 and l < -627370496) then
			return nil
		end
		return h * 1e9 + l
	end

	-- counter returns the counter at k as canonical text and its record, or
	-- nil when k is absent.
	local function counter(k)
		local rec = value(k)
		if not rec then
			return nil, nil
		end
		local c = parseCounter(rec[3])
		if not c then
			fail(WRONG_TYPE, 'key ' .. name(k) .. ' holds a value that is not an integer')
		end
		return c, rec
	end

	local function cmdIncr(r)
		local k, delta, ttl = key(), arg(), num()
		local c, rec = counter(k)
		local n = addInt(c or '0', delta)
		if not n then
			fail(OVERFLOW, (c or '0') .. ' + ' .. delta .. ' leaves the int64 range')
		end
		local expireAt = now + ttl
		if rec then
			expireAt = rec[2]
		end
		r[ALLOWED], r[FOUND], r[INT] = true, rec ~= nil, n
		put(k, {VALUE, expireAt, n})
	end

	return {counter = counter, addInt = addInt, counterNumber = counterNumber, incr = cmdIncr}
end
