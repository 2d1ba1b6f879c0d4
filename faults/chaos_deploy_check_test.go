package faults

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFaultDeployChecksCatchViolations: the deploy checks of scenario 1
// are not blind. The stall measure finds a waiter of another Client left
// waiting after a Close released the lock, and not one handed the lock at
// once, nor the closed Client's own waiters, nor the callers of a Once
// whose run succeeded; the leftover scan finds a Client's hold, hold tag
// and queue place while it is open, and nothing once it is closed.
func TestFaultDeployChecksCatchViolations(t *testing.T) {
	msec := int64(time.Millisecond)
	d := deployNote{Slot: 1, Start: 1000 * msec, End: 1010 * msec, Quiet: true}
	held := []cev{
		{Op: "acq", Who: 10, Slot: 1, Call: 800 * msec, Ret: 900 * msec},
		{Op: "rel", Who: 10, Slot: 1, Call: 950 * msec, Ret: 1010 * msec, Out: "closed", Cl: true},
	}
	with := func(evs ...cev) []cev { return append(append([]cev(nil), held...), evs...) }

	// The lock, free from the Close's return, given 290 ms later.
	st := deployStalls("mutex", with(
		cev{Op: "acq", Who: 20, Slot: 2, Call: 950 * msec, Ret: 1300 * msec},
		cev{Op: "rel", Who: 20, Slot: 2, Call: 1301 * msec, Ret: 1302 * msec}), nil, []deployNote{d})
	require.Len(t, st, 1)
	assert.Equal(t, 290*msec, st[0].stall)
	assert.Equal(t, 1, st[0].cut)
	// The report names the waiter's acquisition's attempts (none: handed
	// on inside its Client) and the fault before the deploy (the soak's).
	bd := d
	bd.Name, bd.Ident, bd.Before = "g1", "g1/1", "kill pubsub, ended 1.5s before its Close"
	st = deployStalls("mutex", with(
		cev{Op: "acq", Who: 20, Slot: 2, Call: 950 * msec, Ret: 1300 * msec, Att: 0, AttOK: true},
		cev{Op: "rel", Who: 20, Slot: 2, Call: 1301 * msec, Ret: 1302 * msec}), nil, []deployNote{bd})
	require.Len(t, st[0].over, 1)
	var e errorsOf
	checkDeploys(&e, st)
	require.Len(t, e.errs, 1)
	assert.Contains(t, e.errs[0], "its acquisition sent 0 acquisition scripts; the fault before the deploy: kill pubsub, ended 1.5s before its Close")
	st = deployStalls("mutex", held, []wend{{Who: 20, Slot: 2, K: 0, Call: 950 * msec, Ret: 1400 * msec}}, []deployNote{d})
	assert.NotContains(t, st[0].waiter, "acquisition sent", "a wait's attempts are not known")
	// A waiter whose context ended waited until then.
	st = deployStalls("mutex", held, []wend{{Who: 20, Slot: 2, K: 0, Call: 950 * msec, Ret: 1400 * msec, End: 1390 * msec}}, []deployNote{d})
	assert.Equal(t, 380*msec, st[0].stall)
	// Given at once: 5 ms.
	st = deployStalls("mutex", with(
		cev{Op: "acq", Who: 20, Slot: 2, Call: 950 * msec, Ret: 1015 * msec},
		cev{Op: "rel", Who: 20, Slot: 2, Call: 1016 * msec, Ret: 1017 * msec}), nil, []deployNote{d})
	assert.Equal(t, 5*msec, st[0].stall)
	// The closed Client's own waiter does not count; its next Client's does.
	st = deployStalls("mutex", held, []wend{{Who: 11, Slot: 1, Call: 950 * msec, Ret: 1005 * msec}, {Who: 12, Slot: 1, Call: 1100 * msec, Ret: 1250 * msec}}, []deployNote{d})
	assert.Equal(t, 150*msec, st[0].stall)
	// A MultiLock waiter on c1 and c2 is not stalled by a hold on c0 ending.
	st = deployStalls("multi", []cev{
		{Op: "acq", Who: 10, Slot: 1, K: 1, Call: 800 * msec, Ret: 900 * msec},
		{Op: "rel", Who: 10, Slot: 1, K: 1, Call: 950 * msec, Ret: 1010 * msec, Cl: true},
		{Op: "acq", Who: 30, Slot: 3, K: 6, Call: 700 * msec, Ret: 710 * msec},
		{Op: "rel", Who: 30, Slot: 3, K: 6, Call: 1390 * msec, Ret: 1400 * msec},
		{Op: "acq", Who: 20, Slot: 2, K: 6, Call: 950 * msec, Ret: 1405 * msec},
		{Op: "rel", Who: 20, Slot: 2, K: 6, Call: 1406 * msec, Ret: 1407 * msec},
	}, nil, []deployNote{d})
	assert.Equal(t, 5*msec, st[0].stall)
	// A Once: a run cut by Close taken over 200 ms late counts; callers
	// after a run that succeeded wait for nothing.
	// A deploy another fault struck near is not measured.
	nd := d
	nd.Quiet = false
	st = deployStalls("mutex", with(
		cev{Op: "acq", Who: 20, Slot: 2, Call: 950 * msec, Ret: 1300 * msec},
		cev{Op: "rel", Who: 20, Slot: 2, Call: 1301 * msec, Ret: 1302 * msec}), nil, []deployNote{nd})
	assert.Zero(t, st[0].stall)
	st = deployStalls("once", []cev{
		{Op: "acq", Who: 10, Slot: 1, K: 3, Call: 800 * msec, Ret: 900 * msec},
		{Op: "rel", Who: 10, Slot: 1, K: 3, Call: 950 * msec, Ret: 1010 * msec, Out: "unknown", Cl: true},
		{Op: "acq", Who: 20, Slot: 2, K: 3, Call: 950 * msec, Ret: 1210 * msec},
		{Op: "rel", Who: 20, Slot: 2, K: 3, Call: 1220 * msec, Ret: 1230 * msec, Out: "ok"},
		{Op: "obs", Who: 21, Slot: 2, K: 3, Call: 1240 * msec, Ret: 1390 * msec},
	}, nil, []deployNote{d})
	assert.Equal(t, 200*msec, st[0].stall)

	// A Cond: worker 20 waits from 500, is signalled at 1000 by worker
	// 10, whose hold a Close released at 1010, and returns holding the
	// lock at 1300: 290 ms beyond its being free (from its signal, not its
	// Wait's call). Its Wait released the lock at 505 (noted), so worker
	// 30's acquisition 600..700 was not stalled by it.
	st = deployStalls("cond", []cev{
		{Op: "acq", Who: 20, Slot: 2, Call: 400 * msec, Ret: 410 * msec},
		{Op: "rel", Who: 20, Slot: 2, Call: 500 * msec, Ret: 505 * msec},
		{Op: "acq", Who: 30, Slot: 3, Call: 600 * msec, Ret: 700 * msec},
		{Op: "rel", Who: 30, Slot: 3, Call: 710 * msec, Ret: 720 * msec},
		{Op: "acq", Who: 10, Slot: 1, Call: 800 * msec, Ret: 900 * msec},
		{Op: "cs", Who: 10, Slot: 1, Call: 990 * msec, Ret: 1000 * msec, Val: "one", Out: "ok"},
		{Op: "rel", Who: 10, Slot: 1, Call: 1005 * msec, Ret: 1010 * msec, Out: "closed", Cl: true},
		{Op: "acq", Who: 20, Slot: 2, Call: 500 * msec, Ret: 1300 * msec, Wake: true},
		{Op: "rel", Who: 20, Slot: 2, Call: 1301 * msec, Ret: 1302 * msec},
	}, nil, []deployNote{d})
	assert.Equal(t, 290*msec, st[0].stall, "the woken waiter: %s", st[0].waiter)
	assert.True(t, st[0].measured)
	// A WaitGroup: its counter's being zero is its lock's being free.
	// Worker 20's task (Add 1, Done) ends at 1005: the counter is zero
	// from then until worker 30's Add at 1400; worker 21, waiting since
	// 900, returns at 1295, 290 ms later. Worker 31's wait from 1500 is
	// under 30's task: not counted.
	wgEv := []cev{
		{Op: "addc", Who: 20, Slot: 2, K: 3, N: 1, Seq: 1, Call: 800 * msec},
		{Op: "add", Who: 20, Slot: 2, K: 3, N: 1, Seq: 1, Call: 800 * msec, Ret: 805 * msec, Out: "ok"},
		{Op: "addc", Who: 20, Slot: 2, K: 3, N: -1, Seq: 2, Call: 1000 * msec},
		{Op: "add", Who: 20, Slot: 2, K: 3, N: -1, Seq: 2, Call: 1000 * msec, Ret: 1005 * msec, Out: "ok"},
		{Op: "wait", Who: 21, Slot: 2, K: 3, Call: 900 * msec, Ret: 1295 * msec, Out: "ok"},
		{Op: "addc", Who: 30, Slot: 3, K: 3, N: 1, Seq: 3, Call: 1400 * msec},
		{Op: "add", Who: 30, Slot: 3, K: 3, N: 1, Seq: 3, Call: 1400 * msec, Ret: 1405 * msec, Out: "ok"},
		{Op: "wait", Who: 31, Slot: 3, K: 3, Call: 1500 * msec, Ret: 1600 * msec, Out: "timeout"},
	}
	st = deployStalls("wg", wgEv, nil, []deployNote{d})
	assert.True(t, st[0].measured)
	assert.Equal(t, 290*msec, st[0].stall, "the waiter after the counter's zero: %s", st[0].waiter)
	assert.Equal(t, 1, st[0].gaps)
	assert.Zero(t, st[0].unknown)
	assert.Contains(t, deployFigures(st).String(), "after the Done that made the counter zero")
	// The Done's outcome unknown (a Redis error in it): the counter is
	// unknown from its call on, nothing is measured, and that is said.
	unk := slices.Clone(wgEv)
	unk[3].Out = "err"
	st = deployStalls("wg", unk, nil, []deployNote{d})
	assert.Zero(t, st[0].stall, st[0].waiter)
	assert.Zero(t, st[0].gaps)
	assert.Equal(t, 1, st[0].unknown)
	// A wipe that no Add overlaps makes it known again (zero): the next
	// task (Add 1 at 1610, Done) makes it zero from 1705, and worker 21's
	// second wait, from 1650, returns at 1720 (15 ms) in the deploy
	// window of 1700.
	unk = append(unk,
		cev{Op: "addc", Who: 20, Slot: 2, K: 3, N: 1, Seq: 5, Call: 1610 * msec},
		cev{Op: "add", Who: 20, Slot: 2, K: 3, N: 1, Seq: 5, Call: 1610 * msec, Ret: 1615 * msec, Out: "ok"},
		cev{Op: "addc", Who: 20, Slot: 2, K: 3, N: -1, Seq: 4, Call: 1690 * msec},
		cev{Op: "add", Who: 20, Slot: 2, K: 3, N: -1, Seq: 4, Call: 1690 * msec, Ret: 1705 * msec, Out: "ok"},
		cev{Op: "wait", Who: 21, Slot: 2, K: 3, Call: 1650 * msec, Ret: 1720 * msec, Out: "ok"})
	d2 := deployNote{Slot: 1, Start: 1700 * msec, End: 1710 * msec, Quiet: true}
	st = deployStalls("wg", unk, nil, []deployNote{d2}, wipe{from: 1450 * msec, to: 1460 * msec})
	assert.Equal(t, 15*msec, st[0].stall, st[0].waiter)
	assert.Zero(t, st[0].unknown)

	// The leftover scan, on a Client that holds a Mutex (its owner and
	// hold tag) and waits in a FairMutex's queue (its wait id).
	srv := startRedis(t)
	prefix := testPrefix()
	rc := client(t, srv.Addr)
	dep, err := newChaosDeploy(7, rc, prefix, time.Second)
	require.NoError(t, err)
	g := dep.gen()
	require.True(t, strings.HasPrefix(g.ident, g.name+"/"), "ident %q", g.ident)
	lctx, err := g.c.NewMutex("m").LockContext(g.ownerCtx(context.Background()))
	require.NoError(t, err)
	other := newDsync(t, srv.Addr, prefix, time.Second)
	octx, err := other.NewFairMutex("f").LockContext(context.Background())
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(g.ownerCtx(context.Background()))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := g.c.NewFairMutex("f").LockContext(wctx)
		assert.ErrorIs(t, err, dsync.ErrClosed)
	}()
	// Until the scan finds all three: the hold's tag reaches Redis a
	// moment after the hold (the tagger sends it after tagDelay), and the
	// wait id after the waiter's call began. (Until 2026-12-04 the loop
	// stopped at any three keys: the FairMutex's two and the Mutex's, in
	// an idle CI run of c0bae9c before the tag was sent.)
	owner, _ := dsync.OwnerOf(lctx)
	_, id, _ := strings.Cut(g.ident, "/")
	var all string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		all = strings.Join(dep.leftBy(g), " ")
		if strings.Contains(all, owner) && strings.Contains(all, "tag of "+g.name) && strings.Contains(all, id+".") {
			break
		}
	}
	assert.Contains(t, all, owner, "the hold's owner")
	assert.Contains(t, all, "tag of "+g.name, "the hold's tag")
	assert.Contains(t, all, id+".", "the wait id in the FairMutex's queue")
	n := dep.deploy(false)
	wg.Wait()
	cancel()
	assert.Empty(t, n.Left, "left after Close")
	assert.Empty(t, n.Err)
	require.NoError(t, other.NewFairMutex("f").UnlockContext(octx))
	dep.close()
}

// TestFaultDeployLeftScanTombstoneExpiring: the leftover scan judges a
// key by what it was at the scan. An attempt's undo tombstone ("x", kept
// a minute) that expires after the scan saw it, before the check read it
// again, is a tombstone, not a key left: the clean-clone make test of
// d6ab56a failed on one (`"dsync53:{c0}:rw:a:287501b1176125b2-2zl":
// "dsync53:{c0}:rw:a:287501b1176125b2-2zl"`, a key found by the SCAN and
// gone at the GET that followed it, so that the check printed no value).
// An attempt marker still "1" (an acquisition's, not dropped) is reported
// whether or not it is still there when the check reads it.
func TestFaultDeployLeftScanTombstoneExpiring(t *testing.T) {
	srv := startRedis(t)
	prefix := testPrefix()
	rc := client(t, srv.Addr)
	dep, err := newChaosDeploy(7, rc, prefix, time.Second)
	require.NoError(t, err)
	defer dep.close()
	g := dep.gen()
	id := identID(g.ident)
	require.NotEmpty(t, id)
	ctx := context.Background()
	key := func(seq string) string { return prefix + ":{c0}:rw:a:" + id + "-" + seq }
	tomb, marker, markerGone := key("1"), key("2"), key("3")
	for k, v := range map[string]string{tomb: "x", marker: "1", markerGone: "1"} {
		require.NoError(t, rc.Do(ctx, rc.B().Set().Key(k).Value(v).PxMilliseconds(60000).Build()).Error())
	}
	// The tombstone and the marker expire (in Redis) once the scan has
	// seen them.
	var seen []string
	dep.scanned = func(keys []leftKey) {
		for _, k := range keys {
			seen = append(seen, k.key)
		}
		for _, k := range []string{tomb, markerGone} {
			require.NoError(t, rc.Do(ctx, rc.B().Pexpire().Key(k).Milliseconds(1).Build()).Error())
		}
		require.Eventually(t, func() bool {
			n, err := rc.Do(ctx, rc.B().Exists().Key(tomb, markerGone).Build()).AsInt64()
			return err == nil && n == 0
		}, 5*time.Second, 5*time.Millisecond, "the two keys expire")
	}
	left := dep.leftBy(g)
	require.Subset(t, seen, []string{tomb, marker, markerGone}, "the scan saw the three keys")
	all := strings.Join(left, " ")
	assert.NotContains(t, all, tomb, "an expiring tombstone reported as left: %v", left)
	assert.Contains(t, all, marker, "a marker still 1")
	assert.Contains(t, all, markerGone, "a marker 1 at the scan, gone since")
	assert.Len(t, left, 2, "%v", left)
}

// TestFaultCondCheckCatchesViolations: checkCond finds a waiter that gave
// up although more Signals than waiters ahead of it came after it
// registered, and one a Broadcast did not wake; and accepts a waiter
// that gave up with as many waiters ahead as Signals.
func TestFaultCondCheckCatchesViolations(t *testing.T) {
	msec := int64(time.Millisecond)
	wait := func(who, slot int, call, ret, end int64, out string) []cev {
		return []cev{{Op: "cwc", Who: who, Slot: slot, Call: call * msec, Ret: call * msec, Hold: (call - 1) * msec},
			{Op: "cw", Who: who, Slot: slot, Call: call * msec, Ret: ret * msec, End: end * msec, Hold: (call - 1) * msec, Out: out}}
	}
	sig := func(slot int, call int64, which string) cev {
		return cev{Op: "cs", Who: 99, Slot: slot, Call: call * msec, Ret: (call + 1) * msec, Hold: (call - 1) * msec, Val: which, Out: "ok"}
	}
	run := &chaosRun{}
	check := func(evs ...[]cev) condFigs {
		var all []cev
		for _, e := range evs {
			all = append(all, e...)
		}
		ft := &testing.T{}
		return checkCond(ft, all, run)
	}
	// Worker 1 waits from 100, worker 2 from 110; two Signals at 200 and
	// 300; worker 2 gives up at 3000: owed the second one.
	f := check(wait(1, 1, 100, 210, 0, "woken"), wait(2, 2, 110, 3000, 2990, "gaveup"), []cev{sig(3, 200, "one"), sig(3, 300, "one")})
	if f.lost != 1 || f.lostChecked != 1 {
		t.Errorf("a lost signal: %+v", f)
	}
	// One Signal only: worker 2 had worker 1 ahead of it.
	f = check(wait(1, 1, 100, 210, 0, "woken"), wait(2, 2, 110, 3000, 2990, "gaveup"), []cev{sig(3, 200, "one")})
	if f.lost != 0 || f.lostChecked != 1 {
		t.Errorf("no lost signal: %+v", f)
	}
	// A Signal too near the end of worker 2's wait is not owed.
	f = check(wait(1, 1, 100, 210, 0, "woken"), wait(2, 2, 110, 3000, 2990, "gaveup"), []cev{sig(3, 200, "one"), sig(3, 2900, "one")})
	if f.lost != 0 {
		t.Errorf("a Signal within condSlack of the end: %+v", f)
	}
	// A Broadcast at 200: worker 2 gave up later.
	f = check(wait(1, 1, 100, 210, 0, "woken"), wait(2, 2, 110, 3000, 2990, "gaveup"), []cev{sig(3, 200, "all")})
	if f.missed != 1 || f.bcastChecked != 2 {
		t.Errorf("a missed Broadcast: %+v", f)
	}
	// A waiter ahead whose process was killed: its place lapsed before
	// worker 2 registered (a lease after the kill), so it is not ahead,
	// and two Signals owed worker 2 one; killed later, it may have kept a
	// signal: not checked.
	never := []cev{{Op: "cwc", Who: 1, Slot: 1, Call: 100 * msec, Ret: 100 * msec, Hold: 99 * msec}}
	run.kills = []fault{{slot: 1, at: 150 * msec}}
	f = check(never, wait(2, 2, 2000, 5000, 4990, "gaveup"), []cev{sig(3, 2100, "one"), sig(3, 2200, "one")})
	if f.lost != 1 || f.lostChecked != 1 {
		t.Errorf("a killed waiter's place gone before: %+v", f)
	}
	run.kills = []fault{{slot: 1, at: 1500 * msec}}
	f = check(never, wait(2, 2, 2000, 5000, 4990, "gaveup"), []cev{sig(3, 2100, "one"), sig(3, 2200, "one")})
	if f.lost != 0 || f.lostChecked != 0 {
		t.Errorf("a killed waiter's place maybe still there: %+v", f)
	}
	// A deploy of the waiter ahead does not exempt worker 2: Close hands
	// on a signal given to its waiters.
	run.kills = nil
	run.deploys = []deployNote{{Slot: 1, Start: 150 * msec, End: 160 * msec}}
	f = check(wait(1, 1, 100, 210, 0, "woken"), wait(2, 2, 110, 3000, 2990, "gaveup"), []cev{sig(3, 200, "one"), sig(3, 300, "one")})
	if f.lost != 1 || f.lostChecked != 1 {
		t.Errorf("a deploy of the waiter ahead: %+v", f)
	}
	run.deploys = nil
	// Worker 2's process was stopped meanwhile: not checked.
	run.stops = []fault{{slot: 2, at: 150 * msec, till: 700 * msec}}
	f = check(wait(1, 1, 100, 210, 0, "woken"), wait(2, 2, 110, 3000, 2990, "gaveup"), []cev{sig(3, 200, "all"), sig(3, 300, "one")})
	if f.missed != 0 || f.lost != 0 || f.bcastChecked != 1 || f.lostChecked != 0 {
		t.Errorf("a frozen waiter: %+v", f)
	}
}
