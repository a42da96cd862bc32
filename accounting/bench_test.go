package accounting

import (
	"testing"
	"time"

	"github.com/haltline/haltline/wire"
)

// BenchmarkReserveSettle is the admission and settlement of one model call
// against a run, its session and a team window.
func BenchmarkReserveSettle(b *testing.B) {
	ledgers := []*Ledger{
		NewLedger("run", Vector{Steps: 1 << 40, Cost: 1 << 60}, Vector{Steps: 1, Cost: 1 << 50}),
		NewLedger("session", Vector{Tokens: 1 << 60}, Vector{}),
		NewWindowLedger("team", Vector{Cost: 1 << 60}, Vector{}, 24*time.Hour, t0),
	}
	want := Vector{Steps: 1, Tokens: 3000, InputTokens: 2000, OutputTokens: 1000, Cost: 15_000_000_000}
	actual := Vector{Steps: 1, Tokens: 2500, InputTokens: 2000, OutputTokens: 500, Cost: 10_000_000_000}
	b.ReportAllocs()
	for b.Loop() {
		r, sf := Reserve(ledgers, want, false, time.Minute, t0)
		if sf != nil {
			b.Fatal(sf)
		}
		r.Settle(actual, t0)
	}
}

// BenchmarkReserveSettleLeases adds the lease registry (Track and untrack).
func BenchmarkReserveSettleLeases(b *testing.B) {
	ledgers := []*Ledger{
		NewLedger("run", Vector{Cost: 1 << 60}, Vector{}),
		NewLedger("session", Vector{Cost: 1 << 60}, Vector{}),
		NewLedger("team", Vector{Cost: 1 << 60}, Vector{}),
	}
	var leases Leases
	want := Vector{Steps: 1, Cost: 15_000_000_000}
	b.ReportAllocs()
	for b.Loop() {
		r, _ := leases.Reserve(ledgers, want, false, time.Minute, t0)
		r.Settle(want, t0)
	}
}

// BenchmarkReserveSettleParallel has every goroutine share the team ledger,
// each with its own run: the contended case.
func BenchmarkReserveSettleParallel(b *testing.B) {
	team := NewLedger("team", Vector{Cost: 1 << 60}, Vector{})
	want := Vector{Steps: 1, Cost: 15_000_000_000}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ledgers := []*Ledger{NewLedger("run", Vector{Cost: 1 << 60}, Vector{}), team}
		for pb.Next() {
			r, _ := Reserve(ledgers, want, false, time.Minute, t0)
			r.Settle(want, t0)
		}
	})
}

func BenchmarkLookup(b *testing.B) {
	c := DefaultCatalog()
	for _, m := range []string{"gpt-4o", "claude-sonnet-4-5-20250929", "unknown-model-2025-01-01"} {
		b.Run(m, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.Lookup(m)
			}
		})
	}
}

func BenchmarkCost(b *testing.B) {
	p, _ := DefaultCatalog().Lookup("gpt-5")
	u := wire.Usage{InputTokens: 4020, CachedTokens: 4000, OutputTokens: 267, ReasoningTokens: 192}
	b.ReportAllocs()
	for b.Loop() {
		p.Cost("openai", u)
	}
}
