package faults

import (
	"testing"

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
	}
	for _, c := range cases {
		got := porcupine.CheckOperations(chaosModel(c.kind), c.ops)
		if got != c.ok {
			t.Errorf("%s model, %s: linearizable %v, want %v", c.kind, c.name, got, c.ok)
		}
		if c.kind == "rw" || c.kind == "sem" {
			if sw := sweepRW(c.ops, c.kind == "sem") == 0; sw != c.ok {
				t.Errorf("%s sweep, %s: linearizable %v, want %v", c.kind, c.name, sw, c.ok)
			}
		}
	}
}
