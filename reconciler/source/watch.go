package source

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// debounce gathers the events of one git operation (a lock file, its
// rename, the reflog) into one call.
const debounce = 50 * time.Millisecond

// Watch watches the refs of the local repository at dir (a work tree or
// a bare repository) and calls changed, once per burst of events, when
// any moves; it returns when ctx ends. This is what makes a commit to a
// local fleet repository take effect in well under a second.
func Watch(ctx context.Context, dir string, changed func()) error {
	gitDir := dir
	if st, err := os.Stat(filepath.Join(dir, ".git")); err == nil && st.IsDir() {
		gitDir = filepath.Join(dir, ".git")
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	defer w.Close()
	// The git dir (packed-refs, HEAD) and every folder under refs/.
	if err := w.Add(gitDir); err != nil {
		return fmt.Errorf("watch %s: %w", gitDir, err)
	}
	addTree := func(root string) {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = w.Add(p)
			}
			return nil
		})
	}
	addTree(filepath.Join(gitDir, "refs"))
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Has(fsnotify.Create) {
				if st, err := os.Stat(ev.Name); err == nil && st.IsDir() {
					addTree(ev.Name)
				}
			}
			if filepath.Ext(ev.Name) == ".lock" {
				continue // the rename that follows is the change
			}
			if timer == nil {
				timer = time.After(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			return fmt.Errorf("watch %s: %w", dir, err)
		case <-timer:
			timer = nil
			changed()
		}
	}
}
