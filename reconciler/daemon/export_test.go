package daemon

// Triggered tells whether a sync was asked for since the last call.
func Triggered(d *Daemon) bool {
	select {
	case <-d.trigger:
		return true
	default:
		return false
	}
}
