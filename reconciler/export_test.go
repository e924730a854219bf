package reconciler

// SetPoint sets the applier's test hook: called after each journal
// write, an error it returns kills the applier there.
func (a *Applier) SetPoint(f func(what string) error) { a.point = f }
