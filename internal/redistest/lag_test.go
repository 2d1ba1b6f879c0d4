package redistest

import (
	"testing"
	"time"
)

// Within is the union of the spans clipped to the stretch: overlapping
// spans count once, spans outside it not at all, in any order.
func TestWithin(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	spans := [][2]time.Time{
		{at(50), at(70)},   // inside, overlapping the next
		{at(-10), at(5)},   // clipped at the start: 5
		{at(60), at(80)},   // with the first: 50..80, 30
		{at(95), at(130)},  // clipped at the end: 5
		{at(200), at(300)}, // outside
	}
	if got, want := Within(at(0), at(100), spans), 40*time.Millisecond; got != want {
		t.Fatalf("Within = %v, want %v", got, want)
	}
	if got := Within(at(0), at(100), nil); got != 0 {
		t.Fatalf("Within of no spans = %v", got)
	}
}
