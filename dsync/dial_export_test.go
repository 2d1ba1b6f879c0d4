package dsync

import "github.com/redis/rueidis"

// ParseDialURL is the URL reading of Dial, for its table test.
var ParseDialURL = parseDialURL

// Owned returns the rueidis client c made with Dial and closes in Close
// (nil for a Client from NewClient).
func Owned(c *Client) rueidis.Client { return c.owned }
