package scripts

import _ "embed"

var (
	//go:embed inspect_lock.lua
	inspectLockSrc string
	//go:embed force_unlock.lua
	forceUnlockSrc string
	//go:embed inspect_other.lua
	inspectOtherSrc string
)

// Scripts behind Client.Inspect and Client.ForceUnlock. InspectLock and
// ForceUnlock read and reset the "<owner> <token> <count>" value shared by
// Mutex and FairMutex.
var (
	InspectLock = newScript(inspectLockSrc)
	ForceUnlock = newScript(forceUnlockSrc)
	// InspectOther reads the RWMutex, Semaphore, Once and WaitGroup layouts.
	InspectOther = newScript(inspectOtherSrc)
)
