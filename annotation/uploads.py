"""An upload handler that stops a file upload at the import size limit while it arrives.

Django has no size limit for uploaded files (DATA_UPLOAD_MAX_MEMORY_SIZE counts only the other
form fields), so without this a multi-gigabyte upload would be written to a temporary file in
full before the import view could look at its size.
"""

from django.core.files.uploadhandler import FileUploadHandler, StopUpload

FORM_FIELDS_BYTES = 64 * 1024


class UploadLimitHandler(FileUploadHandler):
    """Put first in `request.upload_handlers`. Past `max_bytes` it stops reading the file (the
    rest of the request body is read and discarded, so the browser still gets the page) and
    records the refusal in `exceeded`, which the view turns into a form error."""

    def __init__(self, request, *, max_bytes: int):
        super().__init__(request)
        self.max_bytes = max_bytes
        self.exceeded = False

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        # The whole request is bigger than any file we would accept plus the form's few small
        # fields: the file will be refused at its first chunk, before anything is written.
        if content_length and content_length > self.max_bytes + FORM_FIELDS_BYTES:
            self.exceeded = True
        return None

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        if self.exceeded or start + len(raw_data) > self.max_bytes:
            self.exceeded = True
            raise StopUpload(connection_reset=False)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None
