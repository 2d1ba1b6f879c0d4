package dsync

import (
	"context"
	"strings"
)

// An Election's lock is a FairMutex under a name of its own (see
// electionLockName), so Inspect, List and ForceUnlock reach it as that
// FairMutex and report it as the election. Their calls on such a name do
// not look for an election under it again (isElectionLock): that would
// never end.

func isElectionLock(name string) bool { return strings.HasPrefix(name, "\x00election") }

// inspectElection returns the state of the election called name: the
// leader's hold of the lock, the candidates in line, and the leader as its
// record says. ok is false when the election has no state in Redis.
func (c *Client) inspectElection(ctx context.Context, name string) (st LockState, ok bool, err error) {
	if isElectionLock(name) {
		return st, false, nil
	}
	e := c.NewElection(name)
	states, err := c.Inspect(ctx, electionLockName(name))
	if err != nil {
		return st, false, err
	}
	for _, s := range states {
		if s.Kind == KindFairMutex {
			st, ok = s, true
		}
	}
	rec, err := e.read(ctx, 0)
	if err != nil {
		return st, false, err
	}
	st.Leader = rec.current()
	ok = ok || len(rec.changes) > 0
	st.Kind, st.Name = KindElection, name
	return st, ok, nil
}

// forceElection ends the term of the election called name, whoever leads
// it: the observers are told there is no leader, the lock is released and
// the next candidate in line is woken. The leader finds its hold gone at its
// next renewal, and its leadership context is cancelled as lost.
func (c *Client) forceElection(ctx context.Context, name string) (bool, error) {
	if isElectionLock(name) {
		return false, nil
	}
	e := c.NewElection(name)
	rec, err := e.read(ctx, 0)
	if err != nil {
		return false, err
	}
	if l := rec.current(); l.Term != 0 {
		if err := c.run(ctx, e.resignCall(l.Owner, l.Term)).Error(); err != nil {
			return false, wrapErr(KindElection, name, err)
		}
	}
	refs, err := c.forceUnlock(ctx, electionLockName(name))
	if err != nil {
		return false, wrapErr(KindElection, name, err)
	}
	return len(refs) > 0, nil
}

// electionRef maps a key's name and kind part to the election it belongs
// to, if it does: the election's lock ("fair...") and record ("election...")
// are under its lock name. A hashed lock name (see electionLockName) cannot
// be turned back and is reported as it is.
func electionRef(name, part string) (LockRef, bool) {
	if !isElectionLock(name) || (part != "fair" && part != "election") {
		return LockRef{}, false
	}
	if n, ok := strings.CutPrefix(name, "\x00election:"); ok {
		name = n
	}
	return LockRef{Kind: KindElection, Name: name}, true
}
