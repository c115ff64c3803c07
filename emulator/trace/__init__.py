"""The .kbt trace: schema shared by both sides, the streaming writer, the validating reader."""
