package cloud

// SetPageSize sets the page Observe asks for, until the returned restore
// is called. Not for parallel tests.
func SetPageSize(n int) (restore func()) {
	old := pageSize
	pageSize = n
	return func() { pageSize = old }
}
