package backup

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"time"
)

// Download writes the backup's objects, as stored (encrypted), as a tar
// stream: ID/manifest.age, ID/snapshot.age, ID/state.age. It needs no keys.
// It opens the three objects before it writes anything, so that a missing
// one fails before a byte is written.
func Download(ctx context.Context, st Store, tenant, id string, w io.Writer) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if !idPattern.MatchString(id) {
		return fmt.Errorf("backup %q: not a backup ID", id)
	}
	t, _ := time.Parse(idTime, id[:len(idTime)])
	objs := []string{manifestObject, partObject(PartSnapshot), partObject(PartState)}
	var rcs []io.ReadCloser
	defer func() {
		for _, rc := range rcs {
			rc.Close()
		}
	}()
	for _, obj := range objs {
		rc, err := st.Get(ctx, objectKey(tenant, id, obj))
		if err != nil {
			return fmt.Errorf("download backup %s of %s: %w", id, tenant, err)
		}
		rcs = append(rcs, rc)
	}
	tw := tar.NewWriter(w)
	for i, rc := range rcs {
		if err := tarObject(tw, id+"/"+objs[i], rc, t); err != nil {
			return fmt.Errorf("download backup %s of %s: %w", id, tenant, err)
		}
	}
	return tw.Close()
}

func tarObject(tw *tar.Writer, name string, rc io.Reader, t time.Time) error {
	s, ok := rc.(interface{ Size() int64 })
	if !ok {
		return fmt.Errorf("%s: the store does not tell its size", name)
	}
	hdr := &tar.Header{Name: name, Mode: 0o600, Size: s.Size(), ModTime: t, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, rc); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
