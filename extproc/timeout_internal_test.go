package extproc

import (
	"testing"
	"time"
)

// The router's timeout never fires before the gateway's bound: rounded up.
func TestUpstreamTimeoutMsRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{time.Microsecond, 1},
		{time.Millisecond, 1},
		{time.Millisecond + time.Nanosecond, 2},
		{639*time.Millisecond + 551*time.Microsecond, 640},
		{5 * time.Second, 5000},
	} {
		if got := upstreamTimeoutMs(tc.d); got != tc.want {
			t.Errorf("upstreamTimeoutMs(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}
