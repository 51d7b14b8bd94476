//! [`Translated`]: a response body rewritten from a fallback's API into the
//! client's as it arrives, or passed on as it is when no translation is set.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};

use super::BodyTranslation;
use crate::BoxError;

pin_project_lite::pin_project! {
    /// A body of the upstream, translated into the client's API once
    /// [`translate`](Self::translate) sets a translation (a cross-provider
    /// fallback's answer), so that every step after the send reads the
    /// client's API without another body type.
    pub(crate) struct Translated<B> {
        #[pin]
        body: B,
        translation: Option<Box<BodyTranslation>>,
    }
}

impl<B> Translated<B> {
    /// `body` as it is, until a translation is set.
    pub(crate) fn new(body: B) -> Self {
        Translated {
            body,
            translation: None,
        }
    }

    /// Rewrites the body through `translation` from now on.
    pub(crate) fn translate(&mut self, translation: BodyTranslation) {
        self.translation = Some(Box::new(translation));
    }

    /// The body itself, for a response passed on unread (never translated).
    pub(crate) fn into_inner(self) -> B {
        self.body
    }
}

impl<B> Body for Translated<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            let frame = ready!(this.body.as_mut().poll_frame(cx));
            let Some(translation) = this.translation.as_mut() else {
                return Poll::Ready(frame.map(|r| {
                    r.map(|f| f.map_data(|mut d| d.copy_to_bytes(d.remaining())))
                        .map_err(Into::into)
                }));
            };
            let translated = match frame {
                None => {
                    let rest = translation.finish();
                    *this.translation = None;
                    match rest {
                        Ok(rest) if rest.is_empty() => return Poll::Ready(None),
                        other => other,
                    }
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error.into()))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(mut data) => translation.push(data.copy_to_bytes(data.remaining())),
                    // Trailers belong to the other provider's API.
                    Err(_trailers) => continue,
                },
            };
            match translated {
                Ok(bytes) if bytes.is_empty() => continue,
                Ok(bytes) => return Poll::Ready(Some(Ok(Frame::data(bytes)))),
                Err(error) => return Poll::Ready(Some(Err(Box::new(error)))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.translation.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.translation {
            Some(_) => SizeHint::default(),
            None => self.body.size_hint(),
        }
    }
}
