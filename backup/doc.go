// Package backup owns how a tenant's backup is written, encrypted, listed,
// verified, read and pruned, and the stores where backups rest: a
// directory (file://) or an S3-compatible bucket (s3://).
//
// A backup is three age-encrypted objects under TENANT/ID/: snapshot.age
// (the etcd snapshot), state.age (the tenant's TF state at that moment)
// and manifest.age (a schema.BackupInfo as JSON, with the SHA-256 and size
// of each decrypted part). The manifest is written last, so a backup
// exists, and is listed, only once it is complete. Everything is encrypted
// in memory before it reaches a store, and streamed with bounded memory
// whatever its size: nothing plain rests on disk.
//
// The package knows nothing of machines, tofu or the server's own store:
// callers hand it a snapshot stream and the state's bytes.
package backup
