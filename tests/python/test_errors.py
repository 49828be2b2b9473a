"""ptcfs.Error survives pickling whole: DCP sends a rank's failure to the other ranks as a pickle
(a refusal in ptcfs.dcp.StorageWriter's global plan reaches every rank with its code and message)."""

import pickle

from ptcfs.errors import Error


def test_an_error_pickles_with_its_code_and_message():
    e = pickle.loads(pickle.dumps(Error("invalid_argument", "j/1: the ranks write through 2 mounts")))
    assert isinstance(e, Error)
    assert (e.code, e.message) == ("invalid_argument", "j/1: the ranks write through 2 mounts")
    assert str(e) == "invalid_argument: j/1: the ranks write through 2 mounts"
