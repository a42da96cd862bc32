package redisbook

import (
	"testing"

	"github.com/haltline/haltline/store/redisstore"
	"github.com/haltline/haltline/store/redisstore/redistest"
)

// redisURL is the server every test shares: REDIS_URL when set (CI),
// otherwise a redis-server started for this package's tests.
var redisURL string

func TestMain(m *testing.M) { redistest.Main(m, &redisURL) }

// openOne opens a Book and a Store on one client and a fresh prefix,
// closed (and the prefix's keys dropped) when the test ends.
func openOne(t testing.TB) (*Book, *redisstore.Store) {
	t.Helper()
	prefix := redistest.Prefix(t)
	st, err := redisstore.Open(redisURL, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); redistest.Drop(redisURL, prefix) })
	return New(st.Client(), prefix), st
}

// openPair opens two Books (two "replicas": two clients) and the first
// one's Store under one fresh prefix, closed when the test ends.
func openPair(t testing.TB) (a, b *Book, s *redisstore.Store) {
	t.Helper()
	prefix := redistest.Prefix(t)
	s, err := redisstore.Open(redisURL, prefix)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := redisstore.Open(redisURL, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		redistest.Drop(redisURL, prefix)
		s.Close()
		s2.Close()
	})
	return New(s.Client(), prefix), New(s2.Client(), prefix), s
}
