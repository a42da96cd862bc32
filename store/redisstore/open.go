package redisstore

import (
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Client timeouts when the URL sets none. They are short on purpose: every
// budget check goes through Redis, and a dead or stalled server must make a
// call fail (closed) within about two seconds, not hang the request.
const (
	dialTimeout  = time.Second
	ioTimeout    = time.Second
	poolTimeout  = time.Second
	retries      = 1 // one retry hides a connection dropped by a restart
	retryBackoff = 50 * time.Millisecond
)

// Open connects to the Redis at url (redis:// or rediss://, as go-redis
// ParseURL reads it; timeouts in its query override the defaults above) and
// returns a Book and a Store sharing one client, every key under prefix
// (DefaultPrefix when empty). The client is closed when both are closed.
//
// Open does not wait for the server: a replica may start before Redis, and
// every call reports its own error until Redis answers.
func Open(url string, prefix string) (*Book, *Store, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("redis url: %w", err)
	}
	if opt.DialTimeout == 0 {
		opt.DialTimeout = dialTimeout
	}
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = ioTimeout
	}
	if opt.WriteTimeout == 0 {
		opt.WriteTimeout = ioTimeout
	}
	if opt.PoolTimeout == 0 {
		opt.PoolTimeout = poolTimeout
	}
	if opt.MaxRetries == 0 {
		opt.MaxRetries = retries
	}
	if opt.MinRetryBackoff == 0 {
		opt.MinRetryBackoff = retryBackoff
	}
	if opt.MaxRetryBackoff == 0 {
		opt.MaxRetryBackoff = retryBackoff
	}
	// One dial attempt per command attempt: go-redis would otherwise dial
	// five times, and a black-holed server would cost five dial timeouts.
	opt.DialerRetries = 1
	// Callers' deadlines bound a call too, not only the socket timeouts.
	opt.ContextTimeoutEnabled = true
	if opt.MaintNotificationsConfig == nil {
		// Cluster-upgrade notifications are a Redis Enterprise feature; on
		// open-source Redis the handshake would only cost a round trip.
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	rdb := redis.NewClient(opt)
	c := &shared{rdb: rdb, refs: 2}
	b := NewBook(rdb, prefix)
	b.conn = c
	s := NewStore(rdb, prefix)
	s.conn = c
	return b, s, nil
}

// shared is the client Open made, closed by the last of its users.
type shared struct {
	mu   sync.Mutex
	rdb  *redis.Client
	refs int
}

func (c *shared) release() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs <= 0 {
		return nil
	}
	c.refs--
	if c.refs == 0 {
		return c.rdb.Close()
	}
	return nil
}
