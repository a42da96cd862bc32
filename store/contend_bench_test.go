package store

import (
	"fmt"
	"testing"
)

// BenchmarkBoltApplyContended is BoltApply with 32 callers per P: with one
// P (-cpu 1, the harness's placement) it shows whether commits still group.
func BenchmarkBoltApplyContended(b *testing.B) {
	s, err := OpenBolt(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	val := make([]byte, 1500)
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if err := <-s.Apply([]Op{{Bucket: Runs, Key: fmt.Appendf(nil, "r-%d", i%512), Value: val}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
