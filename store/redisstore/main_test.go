package redisstore

import (
	"testing"

	"github.com/haltline/haltline/store/redisstore/redistest"
)

// redisURL is the server every test shares: REDIS_URL when set (CI),
// otherwise a redis-server started for this package's tests.
var redisURL string

func TestMain(m *testing.M) { redistest.Main(m, &redisURL) }

// openStore opens a Store on a fresh prefix, closed (and the prefix's
// keys dropped) when the test ends.
func openStore(t testing.TB) *Store {
	t.Helper()
	prefix := redistest.Prefix(t)
	s, err := Open(redisURL, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); redistest.Drop(redisURL, prefix) })
	return s
}
