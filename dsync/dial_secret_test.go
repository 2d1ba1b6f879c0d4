package dsync_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDialNeverShowsThePassword (issue 38, item 3): whatever the password
// holds ('/', '?', '#', '@') and whatever the form (redis://, rediss://,
// sentinel, unix, scheme-less user:pass@host:port), neither the URL's
// reading nor Dial's error shows it; a URL that is read gets the whole
// password. The server, 127.0.0.1:1, refuses at once.
func TestDialNeverShowsThePassword(t *testing.T) {
	const secret = "S3CR3T"
	for _, tc := range []struct {
		url  string
		pw   string // the password read, "" if the URL is refused
		user string
	}{
		{url: "redis://app:ab/" + secret + "@127.0.0.1:1", pw: "ab/" + secret, user: "app"},
		{url: "rediss://:ab/" + secret + "@127.0.0.1:1/0", pw: "ab/" + secret},
		{url: "redis://app:ab?" + secret + "@127.0.0.1:1", pw: "ab?" + secret, user: "app"},
		{url: "redis://app:ab#" + secret + "@127.0.0.1:1", pw: "ab#" + secret, user: "app"},
		{url: "redis://app:ab@" + secret + "@127.0.0.1:1", pw: "ab@" + secret, user: "app"},
		{url: "redis://" + secret + "@127.0.0.1:1"}, // a lone userinfo: a user to rueidis, hidden anyway
		{url: "app:" + secret + "@127.0.0.1:1"},
		{url: ":" + secret + "@127.0.0.1:1"},
		{url: secret + "@127.0.0.1:1"},
		{url: "redis://:ab/" + secret + "@127.0.0.1:99999"},
		{url: "redis://:ab/" + secret + "@127.0.0.1:port"},
		{url: "redis://:ab%zz" + secret + "@127.0.0.1:1"},
		{url: "redis-sentinel://:ab/" + secret + "@127.0.0.1:1"},
		{url: "unix://:ab/" + secret + "@"},
		{url: "http://:ab/" + secret + "@127.0.0.1:1"},
	} {
		t.Run(strings.ReplaceAll(tc.url, "/", "|"), func(t *testing.T) {
			o, err := dsync.ParseDialURL(tc.url)
			if tc.pw != "" {
				require.NoError(t, err)
				assert.Equal(t, tc.pw, o.Password)
				assert.Equal(t, tc.user, o.Username)
			} else if err != nil {
				assert.NotContains(t, err.Error(), secret)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := dsync.Dial(ctx, tc.url)
			if c != nil {
				c.Close()
			}
			require.Error(t, err)
			assert.NotContains(t, err.Error(), secret)
		})
	}
}

// TestDialValidatesBeforeDialing (issue 38, item 4): a port outside
// 1..65535 and a unix:// URL without a path fail at once with
// ErrInvalidArgument, naming what is wrong, without a dial.
func TestDialValidatesBeforeDialing(t *testing.T) {
	for _, tc := range []struct{ url, says string }{
		{"redis://127.0.0.1:99999", `"99999"`},
		{"redis://127.0.0.1:0", `"0"`},
		{"rediss://u:p@127.0.0.1:65536/0", `"65536"`},
		{"redis://127.0.0.1:6379,127.0.0.1:99999", `"99999"`},
		{"redis://127.0.0.1:6379?addr=127.0.0.1:70000", `"70000"`},
		{"127.0.0.1:99999", `"99999"`},
		{"unix://", "no socket path"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := dsync.ParseDialURL(tc.url)
			require.ErrorIs(t, err, dsync.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.says)
			// Canceled at once: only a check before dialing answers.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err = dsync.Dial(ctx, tc.url)
			require.ErrorIs(t, err, dsync.ErrInvalidArgument)
		})
	}
}

// FuzzDialRedactsPassword: no password, of any bytes, shows in the error of
// reading a URL, and one that is read is read whole.
func FuzzDialRedactsPassword(f *testing.F) {
	for _, s := range []string{"", "/", "?", "#", "@", "a/b?c#d@e", "%zz", "%41", ":", "[", "]", " ", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pw string) {
		if strings.Contains(pw, "S3CR3T") {
			return
		}
		pw = "S3CR3T" + pw
		for _, form := range []string{"redis://u:%s@127.0.0.1:1/0", "rediss://:%s@127.0.0.1:1", "u:%s@127.0.0.1:1", "redis-sentinel://:%s@127.0.0.1:26379#m", "unix://u:%s@/tmp/r.sock"} {
			raw := strings.Replace(form, "%s", pw, 1)
			o, err := dsync.ParseDialURL(raw)
			if err != nil {
				if strings.Contains(err.Error(), "S3CR3T") {
					t.Fatalf("%q: the error shows the password: %v", raw, err)
				}
				continue
			}
			want, uerr := url.PathUnescape(pw)
			require.NoError(t, uerr, raw)
			if o.Password != want {
				t.Fatalf("%q: password read as %q", raw, o.Password)
			}
		}
	})
}
