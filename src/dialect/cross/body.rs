//! [`Translated`]: a response body rewritten from a fallback's API into the
//! client's as it arrives, or passed on as it is when no translation is set.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
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

impl<B> Translated<B>
where
    B: Body<Data = Bytes, Error = BoxError>,
{
    /// The next frame through the translation. Out of line, so that the
    /// untranslated poll stays a jump to the inner body's.
    #[inline(never)]
    fn poll_translated(
        mut body: Pin<&mut B>,
        slot: &mut Option<Box<BodyTranslation>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            let frame = ready!(body.as_mut().poll_frame(cx));
            let Some(translation) = slot.as_mut() else {
                return Poll::Ready(frame);
            };
            let translated = match frame {
                None => {
                    let rest = translation.finish();
                    *slot = None;
                    match rest {
                        Ok(rest) if rest.is_empty() => return Poll::Ready(None),
                        other => other,
                    }
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => translation.push(data),
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
}

// Over a body that already yields `Bytes` and `BoxError` (the idle
// timeout's), so that the untranslated path hands each frame on as it
// came: this body is on every response's path and polled on every wake,
// and a translation is rare.
impl<B> Body for Translated<B>
where
    B: Body<Data = Bytes, Error = BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        match this.translation {
            None => this.body.poll_frame(cx),
            Some(_) => Self::poll_translated(this.body, this.translation, cx),
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
