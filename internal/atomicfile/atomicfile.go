// Package atomicfile writes files so that a reader sees the old content or
// the new, never half of one, and a crash keeps one of the two.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write writes data to path with mode: a temporary file in the same
// folder gets the mode, the bytes and an fsync, then is renamed over path.
func Write(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	err = tmp.Chmod(mode)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
