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

// ParsePush is parsePush, for the HTTP side's tests.
func ParsePush(body []byte) (pushEvent, error) { return parsePush(body) }
