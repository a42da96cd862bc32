package redisbook

import "github.com/redis/go-redis/v9"

// Ledger hash fields. p is the window period in microseconds ("0" for a
// plain ledger) and doubles as the existence marker: a ledger is a hash
// with a p field, and scripts never create a hash without one. ws is the
// current window's start in Unix microseconds. l, f, s, r are limit, final
// reserve, spent and reserved, one field per dimension in accounting.Vector
// order (steps, tokens, input, output, tool calls, cost), each a decimal
// int64 string.
//
// Hold hash fields: k the JSON array of the ledger hash keys it reserved on,
// w the wanted amounts (six decimals joined by commas), e its expiry (Unix
// µs), x = "1" once swept (the hash is then a tombstone with a TTL).

// int64Lua is exact signed 64-bit arithmetic for Redis's Lua 5.1, whose only
// number type is a double (integers exact to 2^53 only, and a 50,000 USD cap
// is 5·10^16 pico-USD). A value travels as a decimal string and is worked on
// as two doubles (hi, lo) with v = hi·10^9 + lo and 0 ≤ lo < 10^9: both
// limbs and every intermediate stay far below 2^53, so sums, differences
// and comparisons are exact over the whole int64 range. Results are clamped
// to int64 like accounting's addSat.
const int64Lua = `
local B = 1000000000
local MAXH, MAXL = 9223372036, 854775807
local MINH, MINL = -9223372037, 145224192
-- Library functions as locals: a global lookup per call is most of the
-- cost of these small helpers in Lua 5.1.
local tonumber, floor, ssub, sbyte, sformat = tonumber, math.floor, string.sub, string.byte, string.format
-- A ledger's field names by dimension: 'r' .. d made a new string at
-- every use (half a microsecond each on a slow server).
local L = {'l1', 'l2', 'l3', 'l4', 'l5', 'l6'}
local F = {'f1', 'f2', 'f3', 'f4', 'f5', 'f6'}
local S = {'s1', 's2', 's3', 's4', 's5', 's6'}
local R = {'r1', 'r2', 'r3', 'r4', 'r5', 'r6'}
local function parse(s)
  if not s or s == '0' or s == '' then return 0, 0 end
  local n = #s
  if n <= 15 then
    -- |v| < 10^15 < 2^53: the double is exact, and so is the split (the
    -- quotient's error is far below 1/B, so floor is the true floor).
    local v = tonumber(s)
    if v == nil then error('haltline: not an integer: ' .. s) end
    local h = floor(v / B)
    return h, v - h * B
  end
  local neg = sbyte(s, 1) == 45
  if neg then s = ssub(s, 2); n = n - 1 end
  local h, l = tonumber(ssub(s, 1, n - 9)), tonumber(ssub(s, n - 8))
  if h == nil or l == nil then error('haltline: not an integer: ' .. s) end
  if neg then
    h = -h; l = -l
    if l < 0 then l = l + B; h = h - 1 end
  end
  return h, l
end
local function add(ah, al, bh, bl)
  local h, l = ah + bh, al + bl
  if l >= B then l = l - B; h = h + 1 end
  return h, l
end
local function sub(ah, al, bh, bl)
  local h, l = ah - bh, al - bl
  if l < 0 then l = l + B; h = h - 1 end
  return h, l
end
local function lt(ah, al, bh, bl)
  return ah < bh or (ah == bh and al < bl)
end
local function clamp(h, l)
  if lt(MAXH, MAXL, h, l) then return MAXH, MAXL end
  if lt(h, l, MINH, MINL) then return MINH, MINL end
  return h, l
end
-- fmt prints with %d (a C long: exact for these integral doubles, and
-- half the cost of %.0f); below 9·10^15 in magnitude, under 2^53, the
-- value is one exact double.
local function fmt(h, l)
  if h > -9000000 and h < 9000000 then return sformat('%d', h * B + l) end
  if h > 0 then return sformat('%d%09d', h, l) end
  if l == 0 then return sformat('%d000000000', h) end
  return sformat('-%d%09d', -h - 1, B - l)
end
-- fields reads a whole hash into a table by field name, nil when the key
-- does not exist: on a small hash (a listpack) HGETALL is one pass, where
-- HMGET of every field searches the hash from its start for each.
local function fields(k)
  local a = redis.call('HGETALL', k)
  if #a == 0 then return nil end
  local f = {}
  for i = 1, #a, 2 do f[a[i]] = a[i + 1] end
  return f
end
local function iszero(h, l) return h == 0 and l == 0 end
local function nonneg(h, l)
  if h < 0 then return 0, 0 end
  return h, l
end
-- roll advances a window ledger to the window holding now (µs, or '' for
-- "no time"): spent resets, reserved carries over. Times and periods are
-- microseconds, below 2^53 until the year 2255, so this arithmetic is exact.
local function roll(k, p, ws, now)
  if now == '' or p == '0' then return false end
  local t, period = tonumber(now), tonumber(p)
  if t - tonumber(ws) < period then return false end
  local start = t - (t % period)
  redis.call('HSET', k, 'ws', sformat('%.0f', start),
    's1', '0', 's2', '0', 's3', '0', 's4', '0', 's5', '0', 's6', '0')
  return true
end
local function splitwant(csv)
  local wh, wl, d = {}, {}, 1
  for part in string.gmatch(csv, '[^,]+') do
    wh[d], wl[d] = parse(part)
    d = d + 1
  end
  return wh, wl
end
-- giveback returns a hold's reserved amounts to its ledgers (never below 0).
local function giveback(keys, wh, wl)
  for _, k in ipairs(keys) do
    local f = redis.call('HMGET', k, 'p', 'r1', 'r2', 'r3', 'r4', 'r5', 'r6')
    if f[1] then
      local set = {}
      for d = 1, 6 do
        if not iszero(wh[d], wl[d]) then
          local h, l = parse(f[1 + d])
          set[#set + 1] = R[d]
          set[#set + 1] = fmt(nonneg(sub(h, l, wh[d], wl[d])))
        end
      end
      if #set > 0 then redis.call('HSET', k, unpack(set)) end
    end
  end
end
`

// reserveLua: KEYS[1] the holds index, KEYS[2] the new hold, KEYS[3..] the
// distinct ledgers in the caller's order. ARGV: now µs (or ”), "1" to use
// the final reserve, expiry µs, hold id, then the six wanted amounts.
// Returns {1} when held, {0, ledger index (1-based), dimension (1-based),
// left} on a shortfall.
var reserveScript = redis.NewScript(int64Lua + `
-- A retry of a call whose reply was lost finds its hold: hold ids are
-- random per call, so this is the same reservation, not a new one.
if redis.call('EXISTS', KEYS[2]) == 1 then return {1} end
local now, usefr = ARGV[1], ARGV[2] == '1'
local wh, wl = {}, {}
for d = 1, 6 do wh[d], wl[d] = parse(ARGV[4 + d]) end
local present, read = {}, {}
for i = 3, #KEYS do
  local k = KEYS[i]
  local f = fields(k)
  if f and f.p then
    local rolled = roll(k, f.p, f.ws, now)
    for d = 1, 6 do
      local limit = f[L[d]]
      if limit ~= '0' and not iszero(wh[d], wl[d]) then
        local h, l = parse(limit)
        if not iszero(h, l) then
          if not usefr then h, l = sub(h, l, parse(f[F[d]])) end
          if not rolled then h, l = sub(h, l, parse(f[S[d]])) end
          h, l = sub(h, l, parse(f[R[d]]))
          if lt(h, l, wh[d], wl[d]) then
            return {0, i - 2, d, fmt(nonneg(h, l))}
          end
        end
      end
    end
    present[#present + 1] = k
    read[#present] = f
  end
end
for j, k in ipairs(present) do
  local f, set = read[j], {}
  for d = 1, 6 do
    if not iszero(wh[d], wl[d]) then
      local h, l = parse(f[R[d]])
      set[#set + 1] = R[d]
      set[#set + 1] = fmt(clamp(add(h, l, wh[d], wl[d])))
    end
  end
  if #set > 0 then redis.call('HSET', k, unpack(set)) end
end
redis.call('HSET', KEYS[2], 'k', cjson.encode(present),
  'w', table.concat({ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]}, ','),
  'e', ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
return {1}
`)

// settleLua: KEYS[1] the holds index, KEYS[2] the hold. ARGV: now µs (or
// ”), hold id, the six actual amounts. Returns 1 when settled, 2 for a
// late settle after a sweep (spend booked, nothing returned), 0 when the
// hold was already settled or released.
var settleScript = redis.NewScript(int64Lua + `
local hold = redis.call('HMGET', KEYS[2], 'k', 'w', 'x')
if not hold[1] then return 0 end
local late = hold[3] == '1'
local wh, wl = splitwant(hold[2])
local ah, al = {}, {}
for d = 1, 6 do ah[d], al[d] = parse(ARGV[2 + d]) end
for _, k in ipairs(cjson.decode(hold[1])) do
  local f = fields(k)
  if f and f.p then
    local rolled = roll(k, f.p, f.ws, ARGV[1])
    local set = {}
    for d = 1, 6 do
      if not late and not iszero(wh[d], wl[d]) then
        local h, l = parse(f[R[d]])
        set[#set + 1] = R[d]
        set[#set + 1] = fmt(nonneg(sub(h, l, wh[d], wl[d])))
      end
      if not iszero(ah[d], al[d]) then
        local h, l = 0, 0
        if not rolled then h, l = parse(f[S[d]]) end
        set[#set + 1] = S[d]
        set[#set + 1] = fmt(clamp(add(h, l, ah[d], al[d])))
      end
    end
    if #set > 0 then redis.call('HSET', k, unpack(set)) end
  end
end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], ARGV[2])
if late then return 2 end
return 1
`)

// releaseLua: KEYS[1] the holds index, KEYS[2] the hold; ARGV[1] hold id.
// Returns 1 when it released, 0 when the hold was settled, released or
// swept already (a swept tombstone stays for a late Settle).
var releaseScript = redis.NewScript(int64Lua + `
local hold = redis.call('HMGET', KEYS[2], 'k', 'w', 'x')
if not hold[1] or hold[3] == '1' then return 0 end
local wh, wl = splitwant(hold[2])
giveback(cjson.decode(hold[1]), wh, wl)
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
`)

// sweepLua: KEYS[1] the holds index. ARGV: now µs, the hold key prefix, the
// batch size, the tombstone TTL in ms. Releases up to a batch of holds that
// expired before now, turning each into a tombstone so that a late Settle
// still books its spend. Returns {released, examined}.
var sweepScript = redis.NewScript(int64Lua + `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[3])
local n = 0
for _, id in ipairs(ids) do
  local hk = ARGV[2] .. id
  redis.call('ZREM', KEYS[1], id)
  local hold = redis.call('HMGET', hk, 'k', 'w', 'x')
  if hold[1] and hold[3] ~= '1' then
    local wh, wl = splitwant(hold[2])
    giveback(cjson.decode(hold[1]), wh, wl)
    redis.call('HSET', hk, 'x', '1')
    redis.call('PEXPIRE', hk, ARGV[4])
    n = n + 1
  end
end
return {n, #ids}
`)

// ensureLua: KEYS the ledgers; ARGV fourteen values per ledger: period µs,
// window start µs, six limits, six final reserves. Creates the missing
// ledgers with nothing spent or reserved; existing ones are left alone.
var ensureScript = redis.NewScript(`
for i, k in ipairs(KEYS) do
  if redis.call('HEXISTS', k, 'p') == 0 then
    local o = (i - 1) * 14
    redis.call('HSET', k, 'p', ARGV[o + 1], 'ws', ARGV[o + 2],
      'l1', ARGV[o + 3], 'l2', ARGV[o + 4], 'l3', ARGV[o + 5],
      'l4', ARGV[o + 6], 'l5', ARGV[o + 7], 'l6', ARGV[o + 8],
      'f1', ARGV[o + 9], 'f2', ARGV[o + 10], 'f3', ARGV[o + 11],
      'f4', ARGV[o + 12], 'f5', ARGV[o + 13], 'f6', ARGV[o + 14],
      's1', '0', 's2', '0', 's3', '0', 's4', '0', 's5', '0', 's6', '0',
      'r1', '0', 'r2', '0', 'r3', '0', 'r4', '0', 'r5', '0', 'r6', '0')
  end
end
return 0
`)

// setLimitLua: KEYS[1] the ledger; ARGV six limits then six final
// reserves. A missing ledger stays missing (no half-made hash).
var setLimitScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], 'p') == 0 then return 0 end
redis.call('HSET', KEYS[1],
  'l1', ARGV[1], 'l2', ARGV[2], 'l3', ARGV[3], 'l4', ARGV[4], 'l5', ARGV[5], 'l6', ARGV[6],
  'f1', ARGV[7], 'f2', ARGV[8], 'f3', ARGV[9], 'f4', ARGV[10], 'f5', ARGV[11], 'f6', ARGV[12])
return 1
`)
