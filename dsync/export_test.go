package dsync

// SetWaitGroupObserved sets a function called each time a Wait has
// observed its generation, so tests know every Wait belongs to it; nil
// removes it. Only for tests, set while no Wait runs.
func SetWaitGroupObserved(f func()) { waitGroupObserved = f }

// GroupCallers returns how many callers of key wait in g's process (the
// leader among them), so tests know every caller has joined.
func GroupCallers[V any](g *Group[V], key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc := g.calls[key]; gc != nil {
		return gc.n
	}
	return 0
}

// Preloaded is closed when c's preload of its scripts has ended, so that
// tests counting the commands a cycle sends do not count its SCRIPT LOADs.
func Preloaded(c *Client) <-chan struct{} { return c.preloaded }

// ErrReleased is the cause of a lock context cancelled by its release, for
// the black-box contract table.
var ErrReleased = errReleased

// InDoubt reports whether a call of c has failed without a reply from
// Redis, after which its waits run bounded for a while (Client.inDoubt).
func InDoubt(c *Client) bool { return c.connDoubt.Load() != 0 }

// ClientID is the random part of c's names in Redis (queue members, wait
// ids, its waiting registration), for tests that look for what a closed
// Client left behind.
func ClientID(c *Client) string { return c.id[:16] }
