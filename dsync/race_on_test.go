//go:build race

package dsync_test

// raceExtraAllocs is how many more allocations per cycle the race detector
// shows (it makes sync.Pool drop items at random, among others).
const raceExtraAllocs = 4
