package redisbook

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
)

// benchLedgers is the admission of one model call against a run, its
// session and a team window, as in accounting's BenchmarkReserveSettle.
func benchLedgers(b *testing.B, bk *Book) []string {
	ensure(b, bk,
		accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Steps: 1 << 40, Cost: 1 << 60}, FinalReserve: accounting.Vector{Steps: 1, Cost: 1 << 50}},
		accounting.LedgerSpec{Key: "session", Limit: accounting.Vector{Tokens: 1 << 60}},
		accounting.LedgerSpec{Key: "team", Limit: accounting.Vector{Cost: 1 << 60}, Period: 24 * time.Hour})
	return []string{"run", "session", "team"}
}

var (
	benchWant   = accounting.Vector{Steps: 1, Tokens: 3000, InputTokens: 2000, OutputTokens: 1000, Cost: 15_000_000_000}
	benchActual = accounting.Vector{Steps: 1, Tokens: 2500, InputTokens: 2000, OutputTokens: 500, Cost: 10_000_000_000}
)

// BenchmarkReserveSettle is one Reserve and one Settle (two round trips)
// over three ledgers; ns/op is the latency of admitting and settling a call.
// script-µs/op is the server's time in the two scripts (INFO
// commandstats), which one server spends for every replica's calls.
func BenchmarkReserveSettle(b *testing.B) {
	a, _, _ := openPair(b)
	keys := benchLedgers(b, a)
	b.ReportAllocs()
	s0 := scriptTime(b, a)
	for b.Loop() {
		h, sf, err := a.Reserve(ctx, keys, benchWant, false, time.Minute, t0)
		if err != nil || sf != nil {
			b.Fatal(err, sf)
		}
		if err := a.Settle(ctx, h, benchActual, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((scriptTime(b, a)-s0).Microseconds())/float64(b.N), "script-µs/op")
}

// scriptTime is the time the server has spent running scripts by their
// digest (EVALSHA) since its statistics were last reset.
func scriptTime(b *testing.B, bk *Book) time.Duration {
	info, err := bk.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					us, _ := strconv.ParseInt(v, 10, 64)
					return time.Duration(us) * time.Microsecond
				}
			}
		}
	}
	return 0
}

// BenchmarkReserveSettleParallel: every goroutine (on two replicas) draws
// on the same three ledgers: throughput when the server is the bottleneck.
func BenchmarkReserveSettleParallel(b *testing.B) {
	a, c, _ := openPair(b)
	keys := benchLedgers(b, a)
	b.ReportAllocs()
	b.SetParallelism(8)
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		bk := []*Book{a, c}[n.Add(1)%2]
		for pb.Next() {
			h, sf, err := bk.Reserve(ctx, keys, benchWant, false, time.Minute, t0)
			if err != nil || sf != nil {
				b.Error(err, sf)
				return
			}
			if err := bk.Settle(ctx, h, benchActual, t0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkHeadroom(b *testing.B) {
	a, _, _ := openPair(b)
	keys := benchLedgers(b, a)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Headroom(ctx, keys, false, t0); err != nil {
			b.Fatal(err)
		}
	}
}
