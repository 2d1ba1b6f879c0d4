package dsync

import (
	"strconv"
	"time"
)

// Lease arithmetic: how a lease is sent to Redis and how long a hold is
// certainly ours.

// leaseMS formats a duration as whole milliseconds, at least 1.
func leaseMS(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}

// timerLateness is how late the lease-clock timer may fire and its
// cancellation be seen on a loaded machine: measured 1-4 ms with the test
// suite alone on 2 vCPUs (up to 9 ms with two suites at once), so 1 ms
// let a holder believe in a lease Redis had already ended.
const timerLateness = 5 * time.Millisecond

// validity is how long after an acquire or renewal was sent the hold is
// still certainly ours: the lease, less an allowance for clock drift between
// this process and Redis (1%, as in Redlock) and for timer lateness.
func validity(lease time.Duration) time.Duration {
	return lease - lease/100 - timerLateness
}
