//! The report's shares equal the scripted truth.
