package dsync

import (
	"context"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// ForceUnlock releases every primitive called name, whoever holds it, and
// wakes its waiters: the Mutex and FairMutex holders, every RWMutex hold
// (write and read), every Semaphore permit, a running Once run (its result,
// if any, is not recorded; a waiter runs f next), every running run of a
// Group's keys (likewise: the key is forgotten, see Group.Forget), and it
// resets a WaitGroup
// counter to zero (every Wait returns). It is the operator's last resort for
// a holder that is stuck but still renewing (a holder that died frees the
// lock by itself when its lease runs out): the holder's next renewal finds
// the hold gone and cancels its lock context with ErrLockLost, but until
// then it may still act as the holder, so only fencing tokens protect the
// data it writes. The fencing sequences continue after a forced release.
//
// ForceUnlock returns the primitives it released; none, and no error, when
// nothing was held.
func (c *Client) ForceUnlock(ctx context.Context, name string) ([]LockRef, error) {
	if err := c.checkCall(ctx, checkName(name)); err != nil {
		return nil, err
	}
	var out []LockRef
	for _, l := range inspectable {
		key := c.lockKey(l.part, name)
		keys := []string{key}
		args := []string{leaseMS(freeMarkerTTL), key + ":ch", ""}
		if l.queue {
			keys = append(keys, key+":queue", key+":places")
			args[1], args[2] = "", key+":w:"
		}
		owner, err := c.lua(scripts.ForceUnlock).Exec(ctx, c.rc, keys, args).ToString()
		if err != nil {
			return out, wrapErr(l.kind, name, err)
		}
		if owner != "" {
			out = append(out, LockRef{Kind: l.kind, Name: name})
		}
	}
	rw := c.lockKey("rw", name)
	sem := c.lockKey("sem", name)
	wg := c.lockKey("wg", name)
	for _, f := range []struct {
		kind       Kind
		script     *rueidis.Lua
		keys, args []string
	}{
		{KindRWMutex, scripts.ForceRW, []string{rw, rw + ":readers", rw + ":queue", rw + ":places", rw + ":rwait", rw + ":radmit"}, []string{rw + ":r", rw + ":w:"}},
		{KindSemaphore, scripts.ForceSem, []string{sem, sem + ":holders", sem + ":waiters", sem + ":want", sem + ":undone"}, []string{sem + ":w:"}},
		{KindOnce, scripts.ForceOther, onceKeys(c.lockKey("once", name)), []string{"once"}},
		{KindOnce, scripts.ForceOther, onceKeys(c.lockKey("oncevalue", name)), []string{"once"}},
		{KindWaitGroup, scripts.ForceOther, []string{wg, wg + ":ch", wg + ":gen"}, []string{"wg"}},
	} {
		got, err := c.lua(f.script).Exec(ctx, c.rc, f.keys, f.args).AsStrSlice()
		if err != nil {
			return out, wrapErr(f.kind, name, err)
		}
		if len(got) > 0 {
			out = append(out, LockRef{Kind: f.kind, Name: name})
		}
	}
	if ok, err := c.forceElection(ctx, name); err != nil {
		return out, err
	} else if ok {
		out = append(out, LockRef{Kind: KindElection, Name: name})
	}
	if ok, err := c.forceGroup(ctx, name); err != nil {
		return out, err
	} else if ok {
		out = append(out, LockRef{Kind: KindGroup, Name: name})
	}
	return out, nil
}
