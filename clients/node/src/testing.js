// Test hooks for the suite's mutation check (docs/clients.md scenario 9):
// not part of the package's exports. Each switch plants a bug the suite
// must detect.
export const mutation = {
  /** renewals are never sent */
  noRenewal: false,
  /** a lost lease aborts no signal and does not end its scope */
  noLossSignal: false,
};
