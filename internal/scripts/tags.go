package scripts

import _ "embed"

//go:embed tag_clear.lua
var tagClearSrc string

// TagClear removes a hold's tag (see dsync's Observer.HoldTag) if it is
// still the one the hold wrote.
var TagClear = newScript(tagClearSrc)
