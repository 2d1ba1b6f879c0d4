package faults

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestFaultChaosModelsCatchViolations feeds the chaos scenario's models
// and the RWMutex sweep hand-made histories, so that a check that accepts
// everything cannot pass the scenario unnoticed.
func TestFaultChaosModelsCatchViolations(t *testing.T) {
	op := func(in chIn, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: in.who, Input: in, Output: in.out, Call: call, Return: ret}
	}
	hold := func(who int, read bool, from, to int64) []porcupine.Operation {
		return []porcupine.Operation{op(chIn{op: "acq", who: who, read: read, n: 1}, from, from+1), op(chIn{op: "rel", who: who, read: read, n: 1}, to, to+1)}
	}
	cat := func(hs ...[]porcupine.Operation) (o []porcupine.Operation) {
		for _, h := range hs {
			o = append(o, h...)
		}
		return o
	}
	cases := []struct {
		kind, name string
		ops        []porcupine.Operation
		ok         bool
	}{
		{"mutex", "one after another", cat(hold(0, false, 0, 10), hold(1, false, 12, 20)), true},
		{"mutex", "overlap", cat(hold(0, false, 0, 10), hold(1, false, 5, 20)), false},
		{"rw", "readers share", cat(hold(0, true, 0, 10), hold(1, true, 2, 12)), true},
		{"rw", "writer beside a reader", cat(hold(0, true, 0, 10), hold(1, false, 2, 12)), false},
		{"rw", "two writers", cat(hold(0, false, 0, 10), hold(1, false, 2, 12)), false},
		{"rw", "a hold of no length, then a writer", cat(hold(0, true, 0, 1), hold(1, false, 5, 12)), true},
		{"sem", "3 of 3", cat(hold(0, false, 0, 10), hold(1, false, 2, 12), hold(2, false, 3, 12)), true},
		{"sem", "4 of 3", cat(hold(0, false, 0, 10), hold(1, false, 2, 12), hold(2, false, 3, 12), hold(3, false, 4, 12)), false},
		{"once", "fail then run", []porcupine.Operation{
			op(chIn{op: "acq", who: 0}, 0, 1), op(chIn{op: "rel", who: 0, out: "fail"}, 2, 3),
			op(chIn{op: "acq", who: 1}, 4, 5), op(chIn{op: "rel", who: 1, out: "ok"}, 6, 7), op(chIn{op: "obs", who: 2}, 8, 9)}, true},
		{"once", "run after a success", []porcupine.Operation{
			op(chIn{op: "acq", who: 0}, 0, 1), op(chIn{op: "rel", who: 0, out: "ok"}, 2, 3),
			op(chIn{op: "acq", who: 1}, 4, 5), op(chIn{op: "rel", who: 1, out: "ok"}, 6, 7)}, false},
		{"once", "done seen before any success", []porcupine.Operation{
			op(chIn{op: "obs", who: 2}, 0, 1), op(chIn{op: "acq", who: 0}, 2, 3), op(chIn{op: "rel", who: 0, out: "ok"}, 4, 5)}, false},
		{"once", "unknown outcome, then a run", []porcupine.Operation{
			op(chIn{op: "acq", who: 0}, 0, 1), op(chIn{op: "rel", who: 0, out: "unknown"}, 2, 3),
			op(chIn{op: "acq", who: 1}, 4, 5), op(chIn{op: "rel", who: 1, out: "ok"}, 6, 7)}, true},
		{"oncevalue", "another value", []porcupine.Operation{
			op(chIn{op: "acq", who: 0}, 0, 1), op(chIn{op: "rel", who: 0, out: "ok", val: "a"}, 2, 3), op(chIn{op: "obs", who: 1, val: "b"}, 4, 5)}, false},
		{"wg", "wait at zero", []porcupine.Operation{
			op(chIn{op: "add", n: 1, out: "ok"}, 0, 1), op(chIn{op: "add", n: -1, out: "ok"}, 2, 3), op(chIn{op: "wait", out: "ok"}, 4, 5)}, true},
		{"wg", "wait returns above zero", []porcupine.Operation{
			op(chIn{op: "add", n: 1, out: "ok"}, 0, 1), op(chIn{op: "wait", out: "ok"}, 2, 3)}, false},
		{"wg", "refused at 1", []porcupine.Operation{
			op(chIn{op: "add", n: 1, out: "ok"}, 0, 1), op(chIn{op: "add", n: -1, out: "inval"}, 2, 3)}, false},
		{"wg", "unknown add, then refused", []porcupine.Operation{
			op(chIn{op: "add", n: 1, out: "err"}, 0, 1), op(chIn{op: "add", n: -1, out: "ok"}, 2, 3), op(chIn{op: "add", n: -1, out: "inval"}, 4, 5)}, true},
		{"election", "two leaders at once", cat(hold(0, false, 0, 10), hold(1, false, 5, 20)), false},
		{"sem", "a lost hold never seen valid (released at its acquire's call)", []porcupine.Operation{
			op(chIn{op: "acq", who: 0, n: 3}, 0, 1), op(chIn{op: "rel", who: 0, n: 3}, 5, 20),
			op(chIn{op: "acq", who: 1, n: 1}, 2, 30), op(chIn{op: "rel", who: 1, n: 1}, 2, 31)}, true},
		{"group", "flights one after another, callers of each", []porcupine.Operation{
			op(chIn{op: "acq", who: 0}, 0, 1), op(chIn{op: "obs", who: 2, val: "a"}, 0, 4), op(chIn{op: "rel", who: 0, out: "ok", val: "a"}, 2, 3),
			op(chIn{op: "acq", who: 1}, 5, 6), op(chIn{op: "rel", who: 1, out: "ok", val: "b"}, 7, 8), op(chIn{op: "obs", who: 2, val: "b"}, 7, 9)}, true},
		{"group", "two runs at once", []porcupine.Operation{
			op(chIn{op: "acq", who: 0}, 0, 1), op(chIn{op: "acq", who: 1}, 2, 3),
			op(chIn{op: "rel", who: 0, out: "ok", val: "a"}, 4, 5), op(chIn{op: "rel", who: 1, out: "ok", val: "b"}, 6, 7)}, false},
		{"group", "a caller gets a result before its flight ended", []porcupine.Operation{
			op(chIn{op: "acq", who: 0}, 0, 1), op(chIn{op: "obs", who: 2, val: "a"}, 1, 2), op(chIn{op: "rel", who: 0, out: "ok", val: "a"}, 3, 4)}, false},
		{"group", "a caller gets an older flight's result after a new run began", []porcupine.Operation{
			op(chIn{op: "acq", who: 0}, 0, 1), op(chIn{op: "rel", who: 0, out: "ok", val: "a"}, 2, 3),
			op(chIn{op: "acq", who: 1}, 4, 5), op(chIn{op: "obs", who: 2, val: "a"}, 6, 7), op(chIn{op: "rel", who: 1, out: "ok", val: "b"}, 8, 9)}, false},
		{"group", "a caller gets a result no run produced", []porcupine.Operation{
			op(chIn{op: "acq", who: 0}, 0, 1), op(chIn{op: "rel", who: 0, out: "ok", val: "a"}, 2, 3), op(chIn{op: "obs", who: 2, val: "c"}, 4, 5)}, false},
		{"group", "a leader's unknown end: its result or none", []porcupine.Operation{
			op(chIn{op: "acq", who: 0}, 0, 1), op(chIn{op: "rel", who: 0, out: "unknown", val: "a"}, 2, 3), op(chIn{op: "obs", who: 2, val: "a"}, 4, 5),
			op(chIn{op: "acq", who: 1}, 6, 7), op(chIn{op: "rel", who: 1, out: "ok", val: "b"}, 8, 9)}, true},
	}
	for _, c := range cases {
		got := porcupine.CheckOperations(chaosModel(c.kind), c.ops)
		if got != c.ok {
			t.Errorf("%s model, %s: linearizable %v, want %v", c.kind, c.name, got, c.ok)
		}
		if co := porcupine.CheckOperations(chaosModel(c.kind), coalesceObs(c.ops)); co != got {
			t.Errorf("%s model, %s: linearizable %v with the observations coalesced, %v without", c.kind, c.name, co, got)
		}
		if c.kind == "rw" || c.kind == "sem" {
			if sw := sweepRW(c.ops, c.kind == "sem") == 0; sw != c.ok {
				t.Errorf("%s sweep, %s: linearizable %v, want %v", c.kind, c.name, sw, c.ok)
			}
		}
	}
}

// TestFaultCoalesceObsExact: coalescing a Once's or a Group's
// observations decides what the whole history decides, on random
// histories of flights with many callers each, valid or broken.
func TestFaultCoalesceObsExact(t *testing.T) {
	op := func(in chIn, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: in.who, Input: in, Output: in.out, Call: call, Return: ret}
	}
	r := rand.New(rand.NewPCG(7, 11))
	for _, kind := range []string{"group", "oncevalue"} {
		seen := map[bool]int{}
		for n := range 300 {
			var ops []porcupine.Operation
			at := int64(0)
			vals := []string{}
			flights := 1 + r.IntN(3)
			if kind == "oncevalue" {
				flights = 1
			}
			for f := range flights {
				v := string(rune('a' + f))
				vals = append(vals, v)
				ops = append(ops, op(chIn{op: "acq", who: 100 + f}, at, at+1), op(chIn{op: "rel", who: 100 + f, out: "ok", val: v}, at+10, at+11))
				for c := range 3 + r.IntN(5) {
					call := at - 5 + r.Int64N(30)
					ops = append(ops, op(chIn{op: "obs", who: 200 + 10*f + c, val: v}, call, call+1+r.Int64N(15)))
				}
				at += 20
			}
			if n%3 == 0 { // a caller with a wrong or stale result
				call := r.Int64N(at)
				ops = append(ops, op(chIn{op: "obs", who: 999, val: vals[r.IntN(len(vals))]}, call, call+1+r.Int64N(5)))
			}
			m := chaosModel(kind)
			whole := porcupine.CheckOperations(m, ops)
			if co := porcupine.CheckOperations(m, coalesceObs(slices.Clone(ops))); co != whole {
				t.Fatalf("%s history %d: coalesced %v, whole %v", kind, n, co, whole)
			}
			seen[whole]++
		}
		t.Logf("%s: %d linearizable, %d not", kind, seen[true], seen[false])
		if seen[true] == 0 || seen[false] == 0 {
			t.Errorf("%s: the random histories were all %v", kind, seen[true] > 0)
		}
	}
}

// TestFaultChaosWindowsExact checks that checking in windows decides
// what one check of the whole history decides, on random mutex and
// WaitGroup histories cut into many windows, linearizable or not: holds
// whose waits span several others, releases that return late, Adds whose
// outcome is unknown, and histories broken at random.
func TestFaultChaosWindowsExact(t *testing.T) {
	defer func(n int) { windowOps = n }(windowOps)
	windowOps = 6
	rng := rand.New(rand.NewPCG(1, 2))
	agree := map[string][2]int{} // kind -> linearizable, not
	for i := range 250 {
		ops := randomLockHistory(rng, 4+rng.IntN(4), 20+rng.IntN(40))
		if i%2 == 1 {
			breakHistory(rng, ops)
		}
		whole := porcupine.CheckOperations(chaosModel("mutex"), ops)
		res, where := checkLockWindows(chaosModel("mutex"), ops, 10*time.Second)
		if (res == porcupine.Ok) != whole {
			wins, _ := lockWindows(ops, windowOps)
			t.Fatalf("mutex history %d (%d operations, %d windows): whole check %v, windows %v (%s)", i, len(ops), len(wins), whole, res, where)
		}
		c := agree["mutex"]
		if whole {
			c[0]++
		} else {
			c[1]++
		}
		agree["mutex"] = c

		ops = randomWGHistory(rng, 3+rng.IntN(4), 30+rng.IntN(50))
		if i%2 == 1 {
			breakHistory(rng, ops)
		}
		whole = porcupine.CheckOperations(chaosModel("wg"), ops)
		res, where = checkWGWindows(ops, 10*time.Second)
		if (res == porcupine.Ok) != whole {
			t.Fatalf("wg history %d (%d operations, %d windows): whole check %v, windows %v (%s)", i, len(ops), len(quiescentWindows(ops, windowOps)), whole, res, where)
		}
		c = agree["wg"]
		if whole {
			c[0]++
		} else {
			c[1]++
		}
		agree["wg"] = c
	}
	for k, c := range agree {
		t.Logf("%s: %d linearizable and %d not, windows agreed on all", k, c[0], c[1])
		if c[0] < 25 || c[1] < 25 {
			t.Errorf("%s: %d linearizable and %d not: the histories do not test both ways", k, c[0], c[1])
		}
	}
}

// randomLockHistory is a history of holds of one lock by workers: each
// acquisition called while earlier holds ran (a wait), returned as the
// lock was free, the release returning now and then long after.
func randomLockHistory(rng *rand.Rand, workers, holds int) []porcupine.Operation {
	free := make([]int64, workers) // when each worker may call again
	var ops []porcupine.Operation
	var t int64 = 100
	for range holds {
		w := rng.IntN(workers)
		call := free[w] + rng.Int64N(max(t-free[w], 0)+1)
		aRet := max(t, call) + rng.Int64N(3)
		rCall := aRet + rng.Int64N(6)
		rRet := rCall + 1 + rng.Int64N(3)
		if rng.IntN(6) == 0 {
			rRet += rng.Int64N(60) // a release that returned late
		}
		ops = append(ops,
			porcupine.Operation{ClientId: w, Input: chIn{op: "acq", who: w}, Call: call, Return: aRet},
			porcupine.Operation{ClientId: w, Input: chIn{op: "rel", who: w}, Call: rCall, Return: rRet})
		free[w] = rRet + 1
		t = rCall + 1 + rng.Int64N(4)
	}
	return ops
}

// randomWGHistory is a history of Adds and Waits on one WaitGroup, with
// outcomes from a counter that applies each operation at a moment within
// it, some Add outcomes unknown.
func randomWGHistory(rng *rand.Rand, workers, n int) []porcupine.Operation {
	free := make([]int64, workers)
	type pending struct {
		op porcupine.Operation
		at int64
	}
	var ps []pending
	for range n {
		w := rng.IntN(workers)
		call := free[w] + rng.Int64N(4)
		ret := call + 1 + rng.Int64N(8)
		in := chIn{op: "add", who: w, n: 1}
		switch rng.IntN(4) {
		case 0:
			in.n = -1
		case 1:
			in.op = "wait"
		}
		ps = append(ps, pending{porcupine.Operation{ClientId: w, Input: in, Call: call, Return: ret}, call + rng.Int64N(ret-call+1)})
		free[w] = ret + 1
	}
	slices.SortStableFunc(ps, func(a, b pending) int { return cmp.Compare(a.at, b.at) })
	var c int64
	var ops []porcupine.Operation
	for _, p := range ps {
		in := p.op.Input.(chIn)
		switch {
		case in.op == "wait" && c == 0:
			in.out = "ok"
		case in.op == "wait":
			in.out = "timeout"
		case c+in.n < 0:
			in.out = "inval"
		default:
			c += in.n
			in.out = "ok"
		}
		if in.op == "add" && rng.IntN(8) == 0 {
			in.out = "err"
		}
		p.op.Input, p.op.Output = in, in.out
		ops = append(ops, p.op)
	}
	return ops
}

// breakHistory moves one operation or changes one outcome at random.
func breakHistory(rng *rand.Rand, ops []porcupine.Operation) {
	i := rng.IntN(len(ops))
	o := &ops[i]
	in := o.Input.(chIn)
	switch {
	case in.op == "wait":
		in.out = map[string]string{"ok": "timeout", "timeout": "ok"}[in.out]
	case in.op == "add" && in.out == "ok":
		in.out = "inval"
	case in.op == "add":
		in.out = "ok"
	default:
		d := 1 + rng.Int64N(12)
		if rng.IntN(2) == 0 {
			o.Call -= d // an acquisition or release moved earlier
			o.Return = max(o.Call, o.Return-d)
		} else {
			o.Call += d
			o.Return += d
		}
	}
	o.Input, o.Output = in, in.out
}

// TestFaultChaosGroupCutByClose: a Group run under a deploy's Close, as
// make chaos met it (2026-11-28 07:02, name 397094, figures in ns from
// its log): worker 221's fn began at 615.1 ms, its caller's short deadline
// ended its context, then Close ended the run in Redis; worker 201, in
// another process, was granted the next run (token at 626.7 ms, its fn
// began by 632.92 ms) while 221's fn still ran (it returned at 632.97 ms,
// and Do returned its value with no error). Recorded as running until fn
// returned, the history is two runs at once; recorded as Close cut it
// (chaosGen.cutBy: valid until its last check, ended by the return), it is
// linearizable. The cut recording still catches a real overlap: a second
// run that began while the first one's context was still valid, or a
// Close that began only after Do returned (cutBy then says no).
func TestFaultChaosGroupCutByClose(t *testing.T) {
	op := func(in chIn, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: in.who, Input: in, Output: in.out, Call: call, Return: ret}
	}
	const (
		aCall, aRet      = 614393930, 615117536 // 221's acq (its fn began)
		aFret, aDoRet    = 632974690, 633152297 // 221's fn returned, then its Do
		bCall, bRet      = 616416195, 632924029 // 201's acq
		bFret, bDoRet    = 634852253, 635287066
		lastValidTrapped = aRet + 1000 // 221's last valid check: before the trap, at its fn's start
	)
	history := func(relA porcupine.Operation) []porcupine.Operation {
		return []porcupine.Operation{
			op(chIn{op: "acq", who: 221}, aCall, aRet), relA,
			op(chIn{op: "acq", who: 201}, bCall, bRet), op(chIn{op: "rel", who: 201, out: "ok", val: "err 201/1719"}, bFret, bDoRet),
			op(chIn{op: "obs", who: 202, val: "err 201/1719"}, bFret-10, bDoRet+10),
		}
	}
	m := chaosModel("group")
	plain := op(chIn{op: "rel", who: 221, out: "ok", val: "221/1414"}, aFret, aDoRet)
	if porcupine.CheckOperations(m, history(plain)) {
		t.Errorf("recorded as running until its fn returned, the run is beside the next one: the model must refuse it")
	}
	cut := op(chIn{op: "rel", who: 221, out: "unknown", val: "221/1414"}, lastValidTrapped, aDoRet)
	if !porcupine.CheckOperations(m, history(cut)) {
		t.Errorf("recorded as cut by Close after its last valid check, the run must be linearizable before the next one")
	}
	stillValid := op(chIn{op: "rel", who: 221, out: "unknown", val: "221/1414"}, bRet+1000, aDoRet)
	if porcupine.CheckOperations(m, history(stillValid)) {
		t.Errorf("a run that began while the cut run's context was still valid is two runs at once: the model must refuse it")
	}

	// cutBy: only a Close that began by Do's return cuts the run.
	g := &chaosGen{next: make(chan struct{})}
	close(g.next)
	if g.cutBy(aDoRet) {
		t.Errorf("cutBy with no Close: true")
	}
	g.closing.Store(aDoRet + 1)
	if g.cutBy(aDoRet) {
		t.Errorf("cutBy with a Close that began after Do returned: true")
	}
	g.closing.Store(aFret - 5000)
	if !g.cutBy(aDoRet) {
		t.Errorf("cutBy with a Close that began before Do returned: false")
	}
	var none *chaosGen
	if none.cutBy(aDoRet) {
		t.Errorf("cutBy without deploys: true")
	}

	// unseenCuts counts the run and the overlap, and not a run whose Close
	// Do's error or f's context showed.
	ev := []cev{
		{Op: "acq", Who: 221, K: 1, Call: aCall, Ret: aRet},
		{Op: "rel", Who: 221, K: 1, Call: lastValidTrapped, Ret: aDoRet, Cl: true, Cut: aFret},
		{Op: "acq", Who: 201, K: 1, Call: bCall, Ret: bRet},
		{Op: "rel", Who: 201, K: 1, Call: bFret, Ret: bDoRet},
		{Op: "rel", Who: 5, K: 2, Call: 10, Ret: 20, Cl: true},
	}
	if n, over := unseenCuts(ev); n != 1 || over != 1 {
		t.Errorf("unseenCuts: %d cut, %d overlapped; want 1, 1", n, over)
	}
}
