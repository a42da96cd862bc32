package redisstore

import (
	"fmt"
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

// DefaultPrefix starts every key this package writes.
const DefaultPrefix = "haltline:"

// Open connects to the Redis at url (redis:// or rediss://, as go-redis
// ParseURL reads it; timeouts in its query override the defaults above) and
// returns a Store on it, every key under prefix (DefaultPrefix when empty).
// Its client (Client) may be shared with other users of the same server
// (the ledger book); Close closes it.
//
// Open does not wait for the server: a replica may start before Redis, and
// every call reports its own error until Redis answers.
func Open(url string, prefix string) (*Store, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
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
	s := NewStore(redis.NewClient(opt), prefix)
	s.owned = true
	return s, nil
}
