package redisbook

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix starts every key this package writes: the Redis store's
// (store/redisstore) too, so that one prefix names a deployment's keys.
const DefaultPrefix = "haltline:"

// SweptTTL is how long a swept hold is kept as a tombstone, so that a late
// Settle still books what the call really spent. Sweeps are rare (a call
// that outlived its lease), so tombstones cost little; a Settle later than
// this is not booked.
const SweptTTL = 24 * time.Hour

// sweepBatch bounds the holds one sweep script releases, so that a backlog
// never blocks Redis for long; Sweep loops until the backlog is gone.
const sweepBatch = 256

// Book is an accounting.Book whose ledgers and holds live in Redis, shared
// by every replica that uses the same server and prefix. Each operation is
// one Lua script (EVALSHA, falling back to EVAL when the server lost its
// script cache), so it is atomic with respect to every other replica.
type Book struct {
	rdb    redis.UniversalClient
	prefix string
	holds  string // sorted set of hold ids by expiry (µs)
}

var _ accounting.Book = (*Book)(nil)

// New returns a Book on rdb with every key under prefix (DefaultPrefix
// when empty). The caller keeps ownership of rdb (the Redis store's
// client, when the book shares its server: redisstore.Store.Client).
func New(rdb redis.UniversalClient, prefix string) *Book {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Book{rdb: rdb, prefix: prefix, holds: prefix + "holds"}
}

func (b *Book) ledgerKey(key string) string { return b.prefix + "ledger:" + key }
func (b *Book) holdPrefix() string          { return b.prefix + "hold:" }

// Shared implements accounting.Book: the ledgers live in Redis, so the
// pipeline must not persist them itself.
func (b *Book) Shared() bool { return true }

// dims lists a vector's dimensions in the order of the hash fields.
func dims(v accounting.Vector) [6]int64 {
	return [6]int64{v.Steps, v.Tokens, v.InputTokens, v.OutputTokens, v.ToolCalls, int64(v.Cost)}
}

func vector(d [6]int64) accounting.Vector {
	return accounting.Vector{Steps: d[0], Tokens: d[1], InputTokens: d[2], OutputTokens: d[3], ToolCalls: d[4], Cost: accounting.Money(d[5])}
}

var dimNames = [6]string{
	accounting.DimSteps, accounting.DimTokens, accounting.DimInputTokens,
	accounting.DimOutputTokens, accounting.DimToolCalls, accounting.DimCost,
}

// appendDims appends the six amounts as decimal strings, negatives as 0
// when nonNeg (a negative want or actual would hand back budget never
// taken, as in accounting).
func appendDims(args []any, v accounting.Vector, nonNeg bool) []any {
	for _, x := range dims(v) {
		if nonNeg {
			x = max(x, 0)
		}
		args = append(args, strconv.FormatInt(x, 10))
	}
	return args
}

func nonNegVector(v accounting.Vector) accounting.Vector {
	d := dims(v)
	for i := range d {
		d[i] = max(d[i], 0)
	}
	return vector(d)
}

// micros is now in Unix microseconds for the scripts, or "" for the zero
// time (no window roll), as accounting treats it.
func micros(now time.Time) string {
	if now.IsZero() {
		return ""
	}
	return strconv.FormatInt(now.UnixMicro(), 10)
}

// periodMicros is a window's period in whole microseconds (at least one):
// the scripts compute windows in µs so that times stay exact doubles.
func periodMicros(p time.Duration) int64 {
	if p <= 0 {
		return 0
	}
	return max(int64(p/time.Microsecond), 1)
}

// windowStart is the start of the window holding t, aligned to the epoch.
func windowStart(t, period int64) int64 {
	s := t - t%period
	if t < 0 && t%period != 0 {
		s -= period
	}
	return s
}

// newHoldID is 128 random bits: unique across replicas without a shared
// counter (and so without an extra round trip).
func newHoldID() string {
	var b [16]byte
	u, v := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		b[i], b[8+i] = byte(u>>(8*i)), byte(v>>(8*i))
	}
	return hex.EncodeToString(b[:])
}

// Ensure implements accounting.Book in one script: ledgers that exist keep
// their state and limits, whoever created them.
func (b *Book) Ensure(ctx context.Context, specs []accounting.LedgerSpec, now time.Time) error {
	keys, args := b.ensureArgs(specs, now)
	if len(keys) == 0 {
		return nil
	}
	if err := ensureScript.Run(ctx, b.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("redis book: ensure: %w", err)
	}
	return nil
}

// EnsureRead ensures as Ensure does and reads the ledger key then, as
// Snapshot does (nil when it does not exist), in the same round trip: a
// new run's first call reads its own ledger next, and Begin's lock could
// not (it did not exist yet).
func (b *Book) EnsureRead(ctx context.Context, specs []accounting.LedgerSpec, now time.Time, key string) (*accounting.LedgerSnapshot, error) {
	keys, args := b.ensureArgs(specs, now)
	if len(keys) == 0 {
		return nil, nil
	}
	_, reads, noScript, err := b.scriptThenRead(ctx, ensureScript, keys, args, []string{key})
	if err != nil {
		return nil, fmt.Errorf("redis book: ensure: %w", err)
	}
	if noScript { // nothing was made
		if err := b.Ensure(ctx, specs, now); err != nil {
			return nil, err
		}
		lim, spent, reserved, err := b.Snapshot(ctx, key, now)
		if err != nil {
			return nil, err
		}
		return &accounting.LedgerSnapshot{Limit: lim, Spent: spent, Reserved: reserved}, nil
	}
	ls, err := views([]string{key}, reads, now)
	if err != nil {
		return nil, fmt.Errorf("redis book: snapshot: %w", err)
	}
	if ls[0] == nil {
		return nil, nil
	}
	return &accounting.LedgerSnapshot{Limit: vector(ls[0].limit), Spent: vector(ls[0].spent), Reserved: vector(ls[0].reserved)}, nil
}

// scriptThenRead sends a script and, after it, the HMGET of each ledger,
// pipelined: one round trip, and Redis runs them in order. noScript
// reports that the server had lost the script (it did not run): the
// caller runs it again through the Script, which loads it, and reads
// anew. err is any other error of the script's.
func (b *Book) scriptThenRead(ctx context.Context, script *redis.Script, keys []string, args []any, ledgers []string) (res *redis.Cmd, reads []*redis.SliceCmd, noScript bool, err error) {
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		res, reads = b.queueScriptThenRead(ctx, p, script, keys, args, ledgers)
		return nil
	})
	return scriptThenReadResult(res, reads)
}

// queueScriptThenRead queues scriptThenRead's commands on p.
func (b *Book) queueScriptThenRead(ctx context.Context, p redis.Pipeliner, script *redis.Script, keys []string, args []any, ledgers []string) (*redis.Cmd, []*redis.SliceCmd) {
	res := script.EvalSha(ctx, p, keys, args...)
	reads := make([]*redis.SliceCmd, len(ledgers))
	for i, k := range ledgers {
		reads[i] = p.HMGet(ctx, b.ledgerKey(k), ledgerFields...)
	}
	return res, reads
}

// scriptThenReadResult is scriptThenRead's answer once its commands are
// back.
func scriptThenReadResult(res *redis.Cmd, reads []*redis.SliceCmd) (*redis.Cmd, []*redis.SliceCmd, bool, error) {
	if err := res.Err(); err != nil {
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			return res, reads, true, nil
		}
		return res, reads, false, err
	}
	return res, reads, false, nil
}

// ensureArgs is the ensure script's keys and arguments.
func (b *Book) ensureArgs(specs []accounting.LedgerSpec, now time.Time) (keys []string, args []any) {
	if len(specs) == 0 {
		return nil, nil
	}
	keys = make([]string, 0, len(specs))
	args = make([]any, 0, 14*len(specs))
	seen := make(map[string]bool, len(specs))
	for _, s := range specs {
		if seen[s.Key] {
			continue // the first spec of a key wins, as in MemBook
		}
		seen[s.Key] = true
		keys = append(keys, b.ledgerKey(s.Key))
		p, ws := periodMicros(s.Period), int64(0)
		if p > 0 {
			ws = windowStart(now.UnixMicro(), p)
		}
		args = append(args, strconv.FormatInt(p, 10), strconv.FormatInt(ws, 10))
		args = appendDims(args, s.Limit, false)
		args = appendDims(args, s.FinalReserve, true)
	}
	return keys, args
}

// Reserve implements accounting.Book: one script checks every ledger (after
// rolling windows) and holds want on all of them or on none. Unknown keys
// are ignored and a key given twice counts once, as in MemBook.
func (b *Book) Reserve(ctx context.Context, keys []string, want accounting.Vector, useFinalReserve bool, lease time.Duration, now time.Time) (*accounting.Hold, *accounting.Shortfall, error) {
	r := b.newReservation(keys, want, useFinalReserve, lease, now)
	res, err := reserveScript.Run(ctx, b.rdb, r.keys, r.args...).Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("redis book: reserve: %w", err)
	}
	return r.result(res)
}

// ReserveHeadroom reserves as Reserve does and reads the headroom then left
// on keys, as Headroom does with headFinalReserve, in the same round
// trip, as SettleHeadroom does for a settlement: a streamed call's budget
// header, sent before its settlement, then costs no round trip on the way
// to its first byte. err is the reservation's; read is false when only
// the headroom could not be read.
func (b *Book) ReserveHeadroom(ctx context.Context, keys []string, want accounting.Vector, useFinalReserve bool, lease time.Duration, now time.Time,
	headFinalReserve bool) (h *accounting.Hold, short *accounting.Shortfall, head accounting.Vector, read bool, err error) {
	return b.ReserveEnsuring(ctx, nil, time.Time{}, keys, want, useFinalReserve, lease, now, true, headFinalReserve)
}

// ReserveEnsuring reserves as Reserve does, with the headroom read as
// ReserveHeadroom does when readHead, and the ledgers of specs made (as
// Ensure makes them at ensureAt) ahead of the reservation in the same
// round trip: a new run's first call makes its ledger, then reserves on
// it, and the ensure was a round trip of its own. Redis runs the
// pipeline's commands in order, so the reservation sees the ledgers made.
// The ensure goes as EVAL, not EVALSHA: a server that lost the script
// would otherwise skip it and let the reservation pass over the missing
// ledger (unknown keys are ignored). An ensure that failed fails the
// reservation, whose hold is let go: it was made without those ledgers.
func (b *Book) ReserveEnsuring(ctx context.Context, specs []accounting.LedgerSpec, ensureAt time.Time, keys []string, want accounting.Vector,
	useFinalReserve bool, lease time.Duration, now time.Time, readHead, headFinalReserve bool) (h *accounting.Hold, short *accounting.Shortfall, head accounting.Vector, read bool, err error) {
	r := b.newReservation(keys, want, useFinalReserve, lease, now)
	ekeys, eargs := b.ensureArgs(specs, ensureAt)
	var heads []string
	if readHead {
		heads = keys
	}
	var ensured, reserved *redis.Cmd
	var cmds []*redis.SliceCmd
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if len(ekeys) > 0 {
			ensured = ensureScript.Eval(ctx, p, ekeys, eargs...)
		}
		reserved, cmds = b.queueScriptThenRead(ctx, p, reserveScript, r.keys, r.args, heads)
		return nil
	})
	if ensured != nil {
		if err := ensured.Err(); err != nil {
			_ = b.Release(context.WithoutCancel(ctx), &r.hold)
			return nil, nil, head, false, fmt.Errorf("redis book: ensure: %w", err)
		}
	}
	reserved, cmds, noScript, err := scriptThenReadResult(reserved, cmds)
	if err != nil {
		return nil, nil, head, false, fmt.Errorf("redis book: reserve: %w", err)
	}
	if noScript { // nothing was reserved (the ledgers were made)
		h, short, err := b.Reserve(ctx, keys, want, useFinalReserve, lease, now)
		if err != nil || !readHead {
			return h, short, head, false, err
		}
		head, herr := b.Headroom(ctx, keys, headFinalReserve, now)
		return h, short, head, herr == nil, nil
	}
	res, _ := reserved.Slice()
	if h, short, err = r.result(res); err != nil || !readHead {
		return h, short, head, false, err
	}
	ls, verr := views(keys, cmds, now)
	if verr != nil {
		return h, short, head, false, nil
	}
	return h, short, headroom(ls, headFinalReserve), true, nil
}

// reservation is a Reserve's script arguments, and what its answer means.
type reservation struct {
	keys     []string
	args     []any
	distinct []string
	want     accounting.Vector
	hold     accounting.Hold
}

func (b *Book) newReservation(keys []string, want accounting.Vector, useFinalReserve bool, lease time.Duration, now time.Time) *reservation {
	if lease <= 0 {
		lease = accounting.DefaultLease
	}
	r := &reservation{want: nonNegVector(want), distinct: dedupe(keys)}
	id := newHoldID()
	expires := now.Add(lease)
	r.hold = accounting.Hold{ID: id, Keys: keys, Want: r.want, Expires: expires}
	r.keys = make([]string, 0, 2+len(r.distinct))
	r.keys = append(r.keys, b.holds, b.holdPrefix()+id)
	for _, k := range r.distinct {
		r.keys = append(r.keys, b.ledgerKey(k))
	}
	fr := "0"
	if useFinalReserve {
		fr = "1"
	}
	r.args = make([]any, 0, 10)
	r.args = append(r.args, micros(now), fr, strconv.FormatInt(expires.UnixMicro(), 10), id)
	r.args = appendDims(r.args, r.want, true)
	return r
}

// result reads the reserve script's answer: the hold, or the first
// shortfall.
func (r *reservation) result(res []any) (*accounting.Hold, *accounting.Shortfall, error) {
	if len(res) == 4 {
		if ok, _ := res[0].(int64); ok == 0 {
			i, _ := res[1].(int64)
			d, _ := res[2].(int64)
			s, _ := res[3].(string)
			left, perr := strconv.ParseInt(s, 10, 64)
			if i < 1 || int(i) > len(r.distinct) || d < 1 || d > 6 || perr != nil {
				return nil, nil, fmt.Errorf("redis book: reserve: malformed shortfall %v", res)
			}
			return nil, &accounting.Shortfall{
				Ledger: r.distinct[i-1], Dimension: dimNames[d-1], Need: dims(r.want)[d-1], Left: left,
			}, nil
		}
	}
	if len(res) != 1 {
		return nil, nil, fmt.Errorf("redis book: reserve: unexpected reply %v", res)
	}
	h := r.hold
	return &h, nil, nil
}

// dedupe returns keys without repeats, first occurrence first; it does not
// allocate when there is nothing to drop.
func dedupe(keys []string) []string {
	for i := 1; i < len(keys); i++ {
		for j := range i {
			if keys[i] == keys[j] {
				out := make([]string, 0, len(keys))
			next:
				for _, k := range keys {
					for _, o := range out {
						if o == k {
							continue next
						}
					}
					out = append(out, k)
				}
				return out
			}
		}
	}
	return keys
}

// Settle implements accounting.Book: exactly once per hold, and after a
// sweep it still books the actual spend (without returning anything twice).
func (b *Book) Settle(ctx context.Context, h *accounting.Hold, actual accounting.Vector, now time.Time) error {
	if h == nil || h.ID == "" {
		return nil
	}
	keys, args := b.settleArgs(h, actual, now)
	if err := settleScript.Run(ctx, b.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("redis book: settle: %w", err)
	}
	return nil
}

// settleArgs is the settle script's keys and arguments.
func (b *Book) settleArgs(h *accounting.Hold, actual accounting.Vector, now time.Time) ([]string, []any) {
	args := make([]any, 0, 8)
	return []string{b.holds, b.holdPrefix() + h.ID}, appendDims(append(args, micros(now), h.ID), actual, true)
}

// Release implements accounting.Book: exactly once, and not after a sweep.
func (b *Book) Release(ctx context.Context, h *accounting.Hold) error {
	if h == nil || h.ID == "" {
		return nil
	}
	if err := releaseScript.Run(ctx, b.rdb, []string{b.holds, b.holdPrefix() + h.ID}, h.ID).Err(); err != nil {
		return fmt.Errorf("redis book: release: %w", err)
	}
	return nil
}

// Sweep implements accounting.Book. Every hold is released by exactly one
// script run, so replicas may sweep at the same time.
func (b *Book) Sweep(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		res, err := sweepScript.Run(ctx, b.rdb, []string{b.holds},
			strconv.FormatInt(now.UnixMicro(), 10), b.holdPrefix(), sweepBatch, SweptTTL.Milliseconds()).Int64Slice()
		if err != nil {
			return total, fmt.Errorf("redis book: sweep: %w", err)
		}
		if len(res) != 2 {
			return total, fmt.Errorf("redis book: sweep: unexpected reply %v", res)
		}
		total += int(res[0])
		if res[1] < sweepBatch {
			return total, nil
		}
	}
}

// Forget implements accounting.Book.
func (b *Book) Forget(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = b.ledgerKey(k)
	}
	if err := b.rdb.Del(ctx, full...).Err(); err != nil {
		return fmt.Errorf("redis book: forget: %w", err)
	}
	return nil
}

// SetLimit implements accounting.Book; a missing ledger stays missing.
func (b *Book) SetLimit(ctx context.Context, key string, limit, finalReserve accounting.Vector) error {
	args := make([]any, 0, 12)
	args = appendDims(args, limit, false)
	args = appendDims(args, finalReserve, true)
	if err := setLimitScript.Run(ctx, b.rdb, []string{b.ledgerKey(key)}, args...).Err(); err != nil {
		return fmt.Errorf("redis book: set limit: %w", err)
	}
	return nil
}

// ledgerFields are read by Snapshot and Headroom, in this order.
var ledgerFields = []string{
	"p", "ws",
	"l1", "l2", "l3", "l4", "l5", "l6",
	"f1", "f2", "f3", "f4", "f5", "f6",
	"s1", "s2", "s3", "s4", "s5", "s6",
	"r1", "r2", "r3", "r4", "r5", "r6",
}

// ledgerView is a ledger as read, rolled to now in memory only.
type ledgerView struct {
	limit, finalReserve, spent, reserved [6]int64
}

// read fetches ledgers in one MULTI (a consistent view of all of them);
// missing ledgers come back nil. Reads never write: the roll to now is
// applied to the view, and the next Reserve or Settle rolls for real.
func (b *Book) read(ctx context.Context, keys []string, now time.Time) ([]*ledgerView, error) {
	cmds := make([]*redis.SliceCmd, len(keys))
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HMGet(ctx, b.ledgerKey(k), ledgerFields...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return views(keys, cmds, now)
}

// views reads the ledgers' HMGET replies (see read).
func views(keys []string, cmds []*redis.SliceCmd, now time.Time) ([]*ledgerView, error) {
	out := make([]*ledgerView, len(keys))
	for i, c := range cmds {
		vals, err := c.Result()
		if err != nil {
			return nil, err
		}
		if len(vals) != len(ledgerFields) || vals[0] == nil {
			continue
		}
		var n [26]int64
		for j, v := range vals {
			s, _ := v.(string)
			x, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("ledger %q field %s: %w", keys[i], ledgerFields[j], err)
			}
			n[j] = x
		}
		lv := &ledgerView{}
		copy(lv.limit[:], n[2:8])
		copy(lv.finalReserve[:], n[8:14])
		copy(lv.spent[:], n[14:20])
		copy(lv.reserved[:], n[20:26])
		if p, ws := n[0], n[1]; p > 0 && !now.IsZero() && now.UnixMicro()-ws >= p {
			lv.spent = [6]int64{}
		}
		out[i] = lv
	}
	return out, nil
}

// Snapshot implements accounting.Book; a missing ledger reads as zero.
func (b *Book) Snapshot(ctx context.Context, key string, now time.Time) (limit, spent, reserved accounting.Vector, err error) {
	ls, err := b.read(ctx, []string{key}, now)
	if err != nil {
		return limit, spent, reserved, fmt.Errorf("redis book: snapshot: %w", err)
	}
	if l := ls[0]; l != nil {
		limit, spent, reserved = vector(l.limit), vector(l.spent), vector(l.reserved)
	}
	return limit, spent, reserved, nil
}

// Headroom implements accounting.Book: per dimension, the minimum over the
// ledgers of limit − final reserve (unless useFinalReserve) − spent −
// reserved, never below 0, math.MaxInt64 where unlimited. Advisory, like
// MemBook's: Reserve is what enforces.
func (b *Book) Headroom(ctx context.Context, keys []string, useFinalReserve bool, now time.Time) (accounting.Vector, error) {
	if len(keys) == 0 {
		return headroom(nil, useFinalReserve), nil
	}
	ls, err := b.read(ctx, keys, now)
	if err != nil {
		return accounting.Vector{}, fmt.Errorf("redis book: headroom: %w", err)
	}
	return headroom(ls, useFinalReserve), nil
}

// SettleHeadroom settles h as Settle does and reads the headroom then left
// on keys, as Headroom does, in the same round trip: the settlement's
// script and the ledgers' reads go out pipelined, and Redis runs them in
// order (the reads are not a transaction of their own: another replica's
// write may fall between two of them, as it may between a Settle and a
// Headroom). A call's budget header then costs no round trip after its
// settlement. err is the settlement's; read is false when only the
// headroom could not be read.
func (b *Book) SettleHeadroom(ctx context.Context, h *accounting.Hold, actual accounting.Vector, now time.Time, keys []string, useFinalReserve bool) (head accounting.Vector, read bool, err error) {
	return b.SettleRider(h, actual, now, keys, useFinalReserve).Result(ctx)
}

// SettleRider makes SettleHeadroom's settlement ready to go out in a run
// lock's round trip (RunLock.LockReadRiding, on the same client), one
// round trip fewer than a settlement of its own; its Result is
// SettleHeadroom's.
func (b *Book) SettleRider(h *accounting.Hold, actual accounting.Vector, now time.Time, keys []string, useFinalReserve bool) accounting.Rider {
	return &settleRider{b: b, h: h, actual: actual, now: now, keys: keys, useFinalReserve: useFinalReserve}
}

// settleRider is a settlement with the read of the headroom it leaves:
// the settle script and the ledgers' HMGETs, pipelined after whatever
// the pipeline carrying them holds (Redis runs a pipeline in order).
type settleRider struct {
	b               *Book
	h               *accounting.Hold
	actual          accounting.Vector
	now             time.Time
	keys            []string
	useFinalReserve bool
	res             *redis.Cmd // set once queued
	reads           []*redis.SliceCmd
	views           []*ledgerView // the ledgers as read after it (Result)
}

// Ledger is the state of the ledger key, one of the keys whose headroom
// the settlement read, as read after it (nil when it does not exist);
// read is false when it was not read. Call it after Result.
func (r *settleRider) Ledger(key string) (state *accounting.LedgerSnapshot, read bool) {
	for i, k := range r.keys {
		if k == key && i < len(r.views) {
			if l := r.views[i]; l != nil {
				state = &accounting.LedgerSnapshot{Limit: vector(l.limit), Spent: vector(l.spent), Reserved: vector(l.reserved)}
			}
			return state, true
		}
	}
	return nil, false
}

// queue adds the settlement to p, when it has one to make and has not
// queued it yet.
func (r *settleRider) queue(ctx context.Context, p redis.Pipeliner) {
	if r.h == nil || r.h.ID == "" || r.res != nil {
		return
	}
	keys, args := r.b.settleArgs(r.h, r.actual, r.now)
	r.res, r.reads = r.b.queueScriptThenRead(ctx, p, settleScript, keys, args, r.keys)
}

// Result implements accounting.Rider: the settlement goes out on its own
// when no pipeline carried it. A settlement the server could not run
// (NOSCRIPT) is made again through Settle, which loads the script, and
// the headroom read after it.
func (r *settleRider) Result(ctx context.Context) (head accounting.Vector, read bool, err error) {
	b := r.b
	if r.h == nil || r.h.ID == "" {
		head, err := b.Headroom(ctx, r.keys, r.useFinalReserve, r.now)
		return head, err == nil, nil
	}
	if r.res == nil {
		_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			r.queue(ctx, p)
			return nil
		})
	}
	_, cmds, noScript, err := scriptThenReadResult(r.res, r.reads)
	if err != nil {
		return head, false, fmt.Errorf("redis book: settle: %w", err)
	}
	if noScript {
		// Nothing was settled.
		if err := b.Settle(ctx, r.h, r.actual, r.now); err != nil {
			return head, false, err
		}
		head, err := b.Headroom(ctx, r.keys, r.useFinalReserve, r.now)
		return head, err == nil, nil
	}
	ls, err := views(r.keys, cmds, r.now)
	if err != nil {
		return head, false, nil
	}
	r.views = ls
	return headroom(ls, r.useFinalReserve), true, nil
}

// headroom is Headroom's answer from the ledgers' views (nil: a missing
// ledger), counted by accounting as MemBook's is.
func headroom(ls []*ledgerView, useFinalReserve bool) accounting.Vector {
	h := vector([6]int64{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64})
	for _, l := range ls {
		if l != nil {
			h = h.Min(accounting.LedgerHeadroom(vector(l.limit), vector(l.finalReserve), vector(l.spent), vector(l.reserved), useFinalReserve))
		}
	}
	return h
}

// PrepareReserve makes ReserveEnsuring's reservation (the ledgers of
// specs made ahead of it, the headroom read only when readHead) ready to
// go out in the round trip of a run's guarded write
// (RunLock.WriteReserving), which is applied only if the reservation was
// made: a call's start on the replica that moved its run last, or that
// makes it, is then one round trip, with no lock to take and no commit
// to wait for. Its hold is named before it is made, so that the run's
// write names it too.
func (b *Book) PrepareReserve(specs []accounting.LedgerSpec, ensureAt time.Time, keys []string, want accounting.Vector, useFinalReserve bool,
	lease time.Duration, now time.Time, readHead, headFinalReserve bool) accounting.Prepared {
	r := b.newReservation(keys, want, useFinalReserve, lease, now)
	p := &preparedReserve{b: b, r: r, hold: &r.hold, now: now, headFinalReserve: headFinalReserve}
	p.ekeys, p.eargs = b.ensureArgs(specs, ensureAt)
	if readHead {
		p.heads = keys
	}
	return p
}

// preparedReserve is a reservation with the read of the headroom it
// leaves, made ready to ride in another request's pipeline.
type preparedReserve struct {
	b                *Book
	r                *reservation
	hold             *accounting.Hold
	heads            []string
	now              time.Time
	headFinalReserve bool
	ekeys            []string // the ledgers made ahead of it
	eargs            []any
	ensured          *redis.Cmd
	res              *redis.Cmd // set once queued
	reads            []*redis.SliceCmd
}

// Hold implements accounting.Prepared.
func (p *preparedReserve) Hold() *accounting.Hold { return p.hold }

// queue adds the reservation to pl, once, the ledgers it makes ahead of
// it as EVAL (see ReserveEnsuring).
func (p *preparedReserve) queue(ctx context.Context, pl redis.Pipeliner) {
	if p.res == nil {
		if len(p.ekeys) > 0 {
			p.ensured = ensureScript.Eval(ctx, pl, p.ekeys, p.eargs...)
		}
		p.res, p.reads = p.b.queueScriptThenRead(ctx, pl, reserveScript, p.r.keys, p.r.args, p.heads)
	}
}

// conds are what the reservation made: its hold, with its expiry.
func (p *preparedReserve) conds() [][3]string {
	return [][3]string{{p.b.holdPrefix() + p.hold.ID, "e", strconv.FormatInt(p.hold.Expires.UnixMicro(), 10)}}
}

// Result implements accounting.Prepared: the reservation goes out on its
// own when no pipeline carried it. A server that lost the script made
// nothing: the script is loaded again, and the answer is an error.
func (p *preparedReserve) Result(ctx context.Context) (short *accounting.Shortfall, head accounting.Vector, read bool, err error) {
	if p.res == nil {
		_, _ = p.b.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			p.queue(ctx, pl)
			return nil
		})
	}
	if p.ensured != nil && p.ensured.Err() != nil {
		return nil, head, false, fmt.Errorf("redis book: ensure: %w", p.ensured.Err())
	}
	_, cmds, noScript, err := scriptThenReadResult(p.res, p.reads)
	if err == nil && noScript {
		err = reserveScript.Load(ctx, p.b.rdb).Err()
		if err == nil {
			err = errNoScript
		}
	}
	if err != nil {
		return nil, head, false, fmt.Errorf("redis book: reserve: %w", err)
	}
	res, _ := p.res.Slice()
	if _, short, err = p.r.result(res); err != nil || short != nil || p.heads == nil {
		return short, head, false, err
	}
	ls, verr := views(p.heads, cmds, p.now)
	if verr != nil {
		return nil, head, false, nil
	}
	return nil, headroom(ls, p.headFinalReserve), true, nil
}

// errNoScript is a reservation the server could not run: it had lost
// the script.
var errNoScript = errors.New("script not loaded")

// ReleaseRider makes Release of h ready to ride in a run lock's round
// trip (RunLock.LockReadRiding), ahead of the lock's read of the run's
// ledger: the hold of a guarded write that was refused goes in the round
// trip of the lock taken next. Its Result is Release's error.
func (b *Book) ReleaseRider(h *accounting.Hold) accounting.Rider {
	return &releaseRider{b: b, h: h}
}

type releaseRider struct {
	b   *Book
	h   *accounting.Hold
	res *redis.Cmd // set once queued
}

// queue adds the release to p, once. EVAL, not EVALSHA: a release rides
// only after a refused write, too seldom for the server to have the
// script at hand, and a script it lacks would cost two round trips more.
func (r *releaseRider) queue(ctx context.Context, p redis.Pipeliner) {
	if r.res == nil && r.h != nil && r.h.ID != "" {
		r.res = releaseScript.Eval(ctx, p, []string{r.b.holds, r.b.holdPrefix() + r.h.ID}, r.h.ID)
	}
}

// Result implements accounting.Rider: the release goes out on its own
// (through Release, which loads the script) when no pipeline carried it
// or the server had lost the script.
func (r *releaseRider) Result(ctx context.Context) (accounting.Vector, bool, error) {
	if r.res == nil || redis.HasErrorPrefix(r.res.Err(), "NOSCRIPT") {
		return accounting.Vector{}, false, r.b.Release(ctx, r.h)
	}
	if err := r.res.Err(); err != nil {
		return accounting.Vector{}, false, fmt.Errorf("redis book: release: %w", err)
	}
	return accounting.Vector{}, false, nil
}
