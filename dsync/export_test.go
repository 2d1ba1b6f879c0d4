package dsync

// SetWaitGroupObserved sets a function called each time a Wait has
// observed its generation, so tests know every Wait belongs to it; nil
// removes it. Only for tests, set while no Wait runs.
func SetWaitGroupObserved(f func()) { waitGroupObserved = f }

// ErrReleased is the cause of a lock context cancelled by its release, for
// the black-box contract table.
var ErrReleased = errReleased
