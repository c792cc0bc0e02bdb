-- Part of the batch script (see prelude.lua): res.reserve and res.refund.

-- Budgets (algo/counter.go): reservations and refunds.

local function buildBudgets(S, counters)
	local get, put, del, fail, wrongType, need, isNumber, value, key, arg, num, addWindow, name = S.get, S.put, S.del, S.fail, S.wrongType, S.need, S.isNumber, S.value, S.key, S.arg, S.num, S.addWindow, S.name
	local counter, addInt, counterNumber = counters.counter, counters.addInt, counters.counterNumber

	local function cmdReserve(r)
		local receiptIdx, cost, n = num(), num(), num()
		local receipt = receiptIdx > 0 and S.keyAt(receiptIdx) or nil
		if receipt then
			-- A receipt replaces an earlier receipt, never another record.
			local rec = get(receipt)
			if rec and rec[1] ~= RECEIPT then
				wrongType(receipt, rec[1], RECEIPT)
			end
		end
		local budgets, nxt = {}, {}
		local receiptExpiry = 0
		r[ALLOWED], r[REMAINING] = true, MAX_LIMIT
		for i = 1, n do
			local b = {key = key(), limit = num(), window = num(), refundable = arg() == '1'}
			budgets[i] = b
			local c, rec = counter(b.key)
			b.empty = not c -- absent or expired before the reservation
			-- algo.Budget.Reserve: an empty or expired budget starts a window.
			local count, expireAt = 0, now + b.window
			if c then
				count, expireAt = counterNumber(c), rec[2]
				if not count then
					fail(OVERFLOW, 'budget ' .. name(b.key) .. ' holds ' .. c .. ', below the -2^52 the Redis store evaluates budgets from')
				end
			end
			local d
			if count + cost > b.limit then
				d = {allowed = false, remaining = max(0, b.limit - count), resetAt = expireAt, retry = expireAt - now}
			else
				count = count + cost
				d = {allowed = true, remaining = b.limit - count, resetAt = expireAt, retry = 0}
			end
			nxt[i] = {count = count, expireAt = expireAt}
			addWindow(r, d)
			r[ALLOWED] = r[ALLOWED] and d.allowed
			r[RETRY] = max(r[RETRY], d.retry)
			if b.refundable and (receiptExpiry == 0 or expireAt < receiptExpiry) then
				receiptExpiry = expireAt
			end
		end
		for i, d in ipairs(r[WINDOWS]) do
			if not r[ALLOWED] and d.allowed then
				-- Nothing was reserved: what the budget had, and an empty
				-- budget empty now (no window was anchored).
				d.remaining = d.remaining + cost
				if budgets[i].empty then
					d.resetAt = now
				end
			end
			r[REMAINING] = min(r[REMAINING], d.remaining)
			r[RESET_AT] = max(r[RESET_AT], d.resetAt)
		end
		if not r[ALLOWED] then
			return
		end
		local names = {}
		for i, b in ipairs(budgets) do
			put(b.key, {VALUE, nxt[i].expireAt, string.format('%d', nxt[i].count)})
			if b.refundable then
				names[#names + 1] = string.sub(b.key, #prefix + 1)
			end
		end
		if receipt then
			put(receipt, {RECEIPT, receiptExpiry, cost, names})
		end
	end

	local function cmdRefund(r)
		local k = key()
		r[ALLOWED] = true
		local rec = get(k)
		if not rec then
			return
		end
		if rec[1] ~= RECEIPT then
			wrongType(k, rec[1], RECEIPT)
		end
		local cost, names = rec[3], rec[4]
		need(S.isInt(cost) and cost >= 1 and type(names) == 'table', k)
		for _, n in ipairs(names) do
			need(type(n) == 'string', k)
			-- The budgets share the receipt's partition, so their keys share
			-- its hash slot: the script may name them although KEYS could not.
			local bk = prefix .. n
			local c, brec = counter(bk)
			if c then
				-- algo.BudgetState.Refund: never below zero, keeping the expiry.
				local left = '0'
				if string.byte(c, 1) ~= 45 and c ~= '0' then
					left = addInt(c, string.format('-%d', cost))
					if string.byte(left, 1) == 45 then
						left = '0'
					end
				end
				put(bk, {VALUE, brec[2], left})
			end
		end
		r[FOUND] = true
		del(k)
	end

	return {reserve = cmdReserve, refund = cmdRefund}
end
