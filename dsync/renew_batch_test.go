package dsync_test

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A FairMutex's lock value has the Mutex's layout, so its holds join the
// Mutex holds' renewal batches: 50 held FairMutexes and 50 Mutexes cost a
// batch script per round, not one script per hold.
func TestRenewalBatchesFairMutex(t *testing.T) {
	s := redistest.Start(t)
	c := newClientOn(t, s.Client(t), dsync.WithLease(600*time.Millisecond))
	ctx := ctxT(t)
	for i := range 50 {
		_, err := c.NewFairMutex(fmt.Sprintf("f%d", i)).LockContext(ctx)
		require.NoError(t, err)
		_, err = c.NewMutex(fmt.Sprintf("m%d", i)).LockContext(ctx)
		require.NoError(t, err)
	}
	rc := s.Client(t)
	require.NoError(t, rc.Do(ctx, rc.B().ConfigResetstat().Build()).Error())
	calls := func(cmd string) int {
		info, err := rc.Do(ctx, rc.B().Info().Section("commandstats").Build()).ToString()
		require.NoError(t, err)
		m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	// Renewals run every lease/3: wait for 3 rounds of 100 holds.
	// (A batch renews each hold with one PEXPIREAT.)
	waitFor(t, 5*time.Second, "3 renewal rounds", func() bool { return calls("pexpireat") >= 300 })
	pexpires, scripts := calls("pexpireat"), calls("evalsha")+calls("eval")
	t.Logf("%d renewals in %d script calls", pexpires, scripts)
	assert.LessOrEqual(t, scripts*20, pexpires, "%d renewals took %d script calls: FairMutex holds are not batched", pexpires, scripts)
}
