package bolt

// Kinds returns the kinds of which the store holds or held resources, in
// byte order: the API kinds and the kinds of internal records alike. A copy of
// the whole store (`rezuscloud store copy`) reads it, since Tx lists the
// resources of a kind it is given.
func (tx *Tx) Kinds() ([]string, error) {
	var out []string
	err := tx.tx.Bucket(bucketResources).ForEachBucket(func(k []byte) error {
		out = append(out, string(k))
		return nil
	})
	return out, err
}

// StateNames returns the names under which TF states were ever stored, in
// byte order, those without a current version (deleted, with their kept
// versions) among them.
func (tx *Tx) StateNames() ([]string, error) {
	var out []string
	err := tx.tx.Bucket(bucketStates).ForEachBucket(func(k []byte) error {
		out = append(out, string(k))
		return nil
	})
	return out, err
}
