package pipeline

import (
	"slices"
	"strings"
	"testing"

	"github.com/haltline/haltline/store"
)

// FuzzOwnedKeys: reading a store.Owned record (or an entry of store.Ended,
// which may be "1") never panics, whatever its bytes, and gives back the
// keys own wrote, in order, each with its bucket.
func FuzzOwnedKeys(f *testing.F) {
	f.Add([]byte("1"), "tc:call_1\ntx:9f2c\nt-0a1b")
	f.Add([]byte{'l', 0xff, 0xff, 0xff, 0xff, 0x0f, 'x'}, "")
	f.Add([]byte{'l', 3, 'a', 'b'}, "\n\n")
	f.Fuzz(func(t *testing.T, raw []byte, keys string) {
		ownedKeys(raw, func(store.Bucket, []byte) {})
		kinds := []byte{ownedLineage, ownedApproval, ownedBlob}
		var g governance
		var want []string
		for i, k := range strings.Split(keys, "\n") {
			g.own(kinds[i%3], k)
			want = append(want, string(ownedBuckets[kinds[i%3]])+" "+k)
		}
		var got []string
		ownedKeys(g.owned, func(b store.Bucket, key []byte) { got = append(got, string(b)+" "+string(key)) })
		if !slices.Equal(got, want) {
			t.Fatalf("read back %q, want %q", got, want)
		}
	})
}
