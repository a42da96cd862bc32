// Package redisbook owns the ledger book on Redis (Book, an
// accounting.Book shared by every replica on one Redis, docs/design.md
// §9) and the pipeline's run lock on Redis (RunLock), which carries the
// book's reads, settlements and releases in the round trip of the Redis
// store's lock (store/redisstore, whose client the Book shares), and a
// settlement or a reservation (PrepareReserve) in that of a run's write
// without the lock (WriteGuarded, WriteReserving: the store's guarded
// write, which a reservation's write also makes wait on the hold made and
// on the run's ledger as counted).
//
// It must not hold business rules beyond the ledger arithmetic the Book
// contract defines (all-or-nothing reservation, final reserve, windows,
// exactly-once settlement, headroom): what a refusal means, which ledgers
// a call draws on and what the limits are is decided by its callers. It
// imports no storage package: the run lock it extends is the store's,
// handed in (Locker).
//
// # Atomicity
//
// Every Book operation that writes is one Lua script (EVALSHA, with EVAL
// when the server's script cache was flushed), so it is atomic with respect
// to every replica without locks: Reserve rolls the window ledgers, checks
// each ledger in the caller's order and adds to reserved on all of them or
// on none, then stores the hold and indexes it by expiry in a sorted set.
// Settle and Release delete the hold, so only the first of them (on any
// replica) has an effect. Sweep turns an expired hold into a tombstone
// (kept SweptTTL) so that a late Settle still books the actual spend once,
// while a late Release does nothing. Hold ids are 128 random bits, unique
// across replicas without a counter round trip; they also make Reserve
// idempotent, which matters because go-redis retries a command once after a
// network error or read timeout: the retried script finds its hold and
// returns it instead of reserving twice. Headroom and Snapshot only read
// (one MULTI), applying a pending window roll to what they return.
//
// # Money stays exact
//
// Amounts are int64 (cost in pico-USD), but Redis's Lua 5.1 has only
// doubles, exact to 2^53 ≈ 9,007 USD in pico-USD — less than one team's
// monthly cap; a 50,000 USD cap is 5·10^16. Converting to a coarser unit
// would lose exactness, and HINCRBY, although 64-bit exact, hands its result
// back to Lua as a double, so comparing against it is inexact again. So the
// hash fields hold decimal strings, and the scripts parse each into two
// limbs v = hi·10^9 + lo (0 ≤ lo < 10^9) — both far below 2^53, as is every
// intermediate of an addition, subtraction or comparison over the whole
// int64 range — and format the result back as a decimal string. Results
// saturate at the int64 bounds like accounting's addSat. Values below 10^15
// take a shorter parse. Go reads the strings with strconv, exactly. Times
// in the scripts are Unix microseconds (below 2^53 until 2255), so window
// arithmetic is exact too; a window period is rounded down to whole
// microseconds.
//
// # Keys
//
// Under the prefix (DefaultPrefix "haltline:", the store's too):
// ledger:<key> (hash: p, ws, l1..l6, f1..f6, s1..s6, r1..r6), hold:<id>
// (hash: k, w, e, x) and holds (sorted set of hold ids by expiry).
// Scripts touch the ledgers a hold names, so the layout assumes one Redis
// (standalone or Sentinel), not Cluster — unless the prefix is a hash tag
// such as "{haltline}:", which puts every key in one slot. Ledgers are
// never deleted by this package but by Forget.
//
// # Failure
//
// The Book uses the client it is given (the store's, whose Open sets
// short socket timeouts), so while Redis is unreachable every call returns
// an error within about two seconds and the pipeline fails closed; the
// same Book works again when Redis is back. Durability across a Redis
// restart is Redis's own (appendonly); without it a restart loses the
// ledgers.
package redisbook
