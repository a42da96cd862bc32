package loopguard

import (
	"fmt"
	"strings"
	"testing"
)

// args1KB is a realistic tool-call argument object of about 1 KB: nested
// objects in model order, numbers, a timestamp, ids and free text.
func args1KB(i int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"query":"service:checkout AND level:error AND message:\"payment declined\" since 2024-05-01T12:%02d:00Z",`, i%60)
	fmt.Fprintf(&b, `"index":"prod-logs-%d","limit":100,"offset":%d,"sort":[{"field":"@timestamp","order":"desc"},{"field":"host","order":"asc"}],`, i%7, 100*i)
	b.WriteString(`"filters":{"region":"eu-west-1","env":"production","hosts":["web-1","web-2","web-3","web-4"],"min_latency_ms":250.0,"max_latency_ms":1.2e4},`)
	b.WriteString(`"request_id":"req_8f3a9c2e4b1d4f6a9e8c7b5a","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736",`)
	b.WriteString(`"note":"The user reported that checkout fails intermittently for cards issued in the EU; look for declines with code 51 or 05 and correlate with the deploy of build 8812.",`)
	b.WriteString(`"fields":["@timestamp","host","message","status","latency_ms","card_country","decline_code","build"],`)
	b.WriteString(`"options":{"highlight":false,"timeout":"30s","track_total_hits":true,"explain":null}}`)
	for b.Len() < 1024 {
		b.WriteString(" ")
	}
	return []byte(b.String())
}

func BenchmarkFingerprint1KB(b *testing.B) {
	c := NewCanonicalizer(nil)
	args := args1KB(1)
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for b.Loop() {
		c.Fingerprint("agent-1", "query_logs", args)
	}
}

func BenchmarkCanonical1KB(b *testing.B) {
	c := NewCanonicalizer(nil)
	args := args1KB(1)
	dst := make([]byte, 0, 2048)
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for b.Loop() {
		dst = c.Canonical(dst[:0], args)
	}
}

// BenchmarkGuardPerToolCall measures everything the gateway does per tool
// call: fingerprint and sketch the arguments, run the loop detectors on
// the step, fingerprint the result and run the stall detector.
func BenchmarkGuardPerToolCall(b *testing.B) {
	c := NewCanonicalizer(nil)
	const variants = 64
	args := make([][]byte, variants)
	results := make([][]byte, variants)
	ids := make([]string, variants)
	for i := range args {
		args[i] = args1KB(i)
		results[i] = []byte(fmt.Sprintf(`{"hits":[{"host":"web-%d","message":"declined 51"}],"total":%d}`, i%4, i))
		ids[i] = fmt.Sprintf("call_%d", i)
	}
	g := NewGuard(DefaultThresholds())
	calls := make([]Call, 1)
	b.SetBytes(int64(len(args[0])))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % variants
		fp, _, sk := c.CallPrints("agent-1", "query_logs", args[k])
		calls[0] = Call{ID: ids[k], Tool: "query_logs", FP: fp, Sketch: sk}
		if v := g.Step(i, calls); v != nil {
			b.Fatalf("unexpected verdict %+v", v)
		}
		// Results change every time (progress), so the seen set fills up
		// and then evicts: the steady state of a long healthy run.
		obs := c.Observation(results[k])
		obs[15] ^= byte(i >> 6)
		obs[14] ^= byte(i >> 14)
		if v := g.Observe(ids[k], obs); v != nil {
			b.Fatalf("unexpected verdict %+v", v)
		}
		i++
	}
}
