//go:build !race

package dsync_test

const raceExtraAllocs = 0
